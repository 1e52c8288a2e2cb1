"""What agreeing on a preemption stop costs per step on gloo: riding on the step guard's vote, or a vote of its own.

Every checkpointed multi-rank step already does one small all-reduce, the step guard's vote (2 floats:
skip, rollback). The stop flag can ride on it as a third float, be encoded into the second (what
stride does: 2 floats, as before), or go in a separate 1-float all-reduce every step or every K steps.
2 processes x 1 thread on gloo (loopback). The sizes are interleaved call by call (1, 2, 3 floats, ...)
so load changes hit all alike; medians of the per-call time.

    .venv/bin/python benchmarks/stop_vote.py [--calls 3000] [--k 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import time

SIZES = (1, 2, 3)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, calls: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    times: dict[int, list[float]] = {n: [] for n in SIZES}
    for i in range(calls + 100):
        for n in SIZES[i % len(SIZES):] + SIZES[: i % len(SIZES)]:  # rotate the order too
            flags = torch.zeros(n)
            t0 = time.perf_counter()
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            if i >= 100:  # warm-up left out
                times[n].append(time.perf_counter() - t0)
    if rank == 0:
        out.update({n: statistics.median(v) for n, v in times.items()})
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    import torch.multiprocessing as mp

    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_worker, args=(_port(), a.calls, out), nprocs=2, join=True)
        m = {n: v * 1e6 for n, v in dict(out).items()}  # microseconds per call
    vote = m[2]
    rows = {
        "vote alone (2 floats)": vote,
        "stop encoded in the vote (2 floats, chosen)": vote,
        "stop as a third float (3 floats)": m[3],
        "vote + own stop all-reduce every step": vote + m[1],
        f"vote + own stop all-reduce every {a.k} steps": vote + m[1] / a.k,
    }
    for name, us in rows.items():
        print(f"{name:48s} {us:7.1f} us/step  extra {us - vote:+6.1f} us")
    load = os.getloadavg()[0]
    print(f"all-reduce medians: 1 float {m[1]:.1f} us, 2 floats {m[2]:.1f} us, 3 floats {m[3]:.1f} us; "
          f"load average {load:.1f}")
    if a.json:
        print(json.dumps({"allreduce_1_us": m[1], "allreduce_2_us": m[2], "allreduce_3_us": m[3],
                          "encoded_extra_us": 0.0, "third_float_extra_us": m[3] - vote, "own_allreduce_extra_us": m[1],
                          "own_every_k_extra_us": m[1] / a.k, "k": a.k, "load_average": load}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
