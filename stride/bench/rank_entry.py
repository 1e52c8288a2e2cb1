"""One rank of a world-size sweep: pin to this rank's core, then run the `stride` command unchanged.

`python -m stride.bench.rank_entry train CONFIG ...` is `python -m stride train CONFIG ...` with one
call before it: the pinning has to happen inside each rank (torchrun starts every rank with the same
command line) and before torch creates its thread pools, so the threads inherit the core.

With `STRIDE_BENCH_SCHED_DIR` set, the rank also writes, at exit, the scheduler's accounting of its
main (training) thread over the process's life: CPU time and run-queue wait, the time it was ready
to run but another task held the core. On a shared machine that wait is other people's load, and the
sweep reports it beside every efficiency.
"""

from __future__ import annotations

import atexit
import os
import sys
import time

from stride.bench.pinning import pin_from_env
from stride.files import strict_json

SCHED_ENV = "STRIDE_BENCH_SCHED_DIR"


def sched_report(out_dir: str, started: float) -> None:
    """Write sched-rank<RANK>.json: wall since `started`, main-thread CPU and run-queue seconds."""
    try:
        with open(f"/proc/{os.getpid()}/schedstat") as f:  # the main thread (the thread group leader)
            run_ns, wait_ns, _ = f.read().split()
    except (OSError, ValueError):
        return  # no schedstat on this OS: the sweep reports the wait as unknown
    rank = os.environ.get("RANK", "0")
    rec = {"rank": int(rank), "wall_s": time.perf_counter() - started, "cpu_s": int(run_ns) / 1e9,
           "runqueue_wait_s": int(wait_ns) / 1e9}
    tmp = os.path.join(out_dir, f".sched-rank{rank}.json.tmp")
    with open(tmp, "w") as f:
        f.write(strict_json.dumps(rec))
    os.replace(tmp, os.path.join(out_dir, f"sched-rank{rank}.json"))


if __name__ == "__main__":
    started = time.perf_counter()
    core = pin_from_env()
    if core is not None:  # evidence in torchrun.log that the plan was applied
        print(f"stride.bench: local rank {os.environ.get('LOCAL_RANK', '0')} pinned to core {core}", file=sys.stderr)
    if os.environ.get(SCHED_ENV):
        atexit.register(sched_report, os.environ[SCHED_ENV], started)
    from stride.cli.main import entry

    entry(sys.argv[1:])  # sched_report runs among the atexit handlers, then the process ends (stride.cli.process_exit)
