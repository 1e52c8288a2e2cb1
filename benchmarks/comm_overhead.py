"""Does `stride comm` add overhead beyond torch.distributed? Its all_reduce timing vs a bare loop.

Two gloo processes (one thread each). For each size, R rounds alternate (a) stride's own path,
`stride.comm.timing.time_calls` over `Prepared("all_reduce", ...).run`, and (b) a bare timed loop of
`dist.all_reduce` on a tensor of the same size, both between the same barriers and reduced to the
slowest rank. Reports the medians and the median of the per-round ratios (each round pairs two
adjacent measurements, so load from other processes on the machine cancels); goal (issue 9): within 3%.

    python benchmarks/comm_overhead.py [--sizes 4K,256K,4M] [--iters 30] [--rounds 21] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from stride.comm.collectives import ELEM, Prepared
from stride.comm.launch import _free_port
from stride.comm.sizes import parse_bytes
from stride.comm.timing import slowest_rank, time_calls


def bare(x: torch.Tensor, iters: int, warmup: int) -> float:
    for _ in range(warmup):
        dist.all_reduce(x)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    return (time.perf_counter() - t0) / iters


def worker(rank: int, port: int, sizes: list[int], iters: int, rounds: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    res = []
    for nbytes in sizes:
        count = nbytes // ELEM
        p = Prepared("all_reduce", count, rank, 2)
        assert p.check() is None
        x = torch.zeros(count)
        s_times, b_times = [], []
        for r in range(rounds):
            order = (0, 1) if r % 2 == 0 else (1, 0)  # alternate which goes first
            for which in order:
                if which == 0:
                    s_times.append(slowest_rank(time_calls(p.run, iters, 3)))
                else:
                    b_times.append(slowest_rank(bare(x, iters, 3)))
        s, b = statistics.median(s_times), statistics.median(b_times)
        paired = statistics.median(x / y for x, y in zip(s_times, b_times, strict=True))
        res.append({"bytes": nbytes, "stride_us": s * 1e6, "bare_us": b * 1e6, "ratio": paired,
                    "ratio_of_medians": s / b,
                    "stride_rounds_us": [t * 1e6 for t in s_times], "bare_rounds_us": [t * 1e6 for t in b_times]})
    if rank == 0:
        Path(out).write_text(json.dumps(res))
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4K,256K,4M")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="print every round's time")
    a = ap.parse_args()
    sizes = [parse_bytes(s) for s in a.sizes.split(",")]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "res.json")
        mp.start_processes(worker, args=(_free_port(), sizes, a.iters, a.rounds, out), nprocs=2,
                           start_method="spawn")
        res = json.loads(Path(out).read_text())
    for r in res:
        print(f"all_reduce {r['bytes']:>9} B: stride {r['stride_us']:9.1f} us  bare loop {r['bare_us']:9.1f} us  "
              f"ratio {r['ratio']:.3f}")
        if a.verbose:
            print("  stride rounds:", [round(t) for t in r["stride_rounds_us"]])
            print("  bare rounds:  ", [round(t) for t in r["bare_rounds_us"]])
    worst = max(abs(r["ratio"] - 1) for r in res)
    summary = {"sizes": [r["bytes"] for r in res], "ratios": [round(r["ratio"], 4) for r in res],
               "stride_us": [round(r["stride_us"], 1) for r in res], "bare_us": [round(r["bare_us"], 1) for r in res],
               "worst_abs_diff_pct": round(100 * worst, 2), "within_3pct": worst <= 0.03,
               "iters": a.iters, "rounds": a.rounds}
    if a.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
