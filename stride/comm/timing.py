"""Timing of one collective: warm-up, then `iters` back-to-back calls between two barriers.

This is the whole of what stride adds around `torch.distributed`: one `perf_counter` pair per batch of
calls, no per-call bookkeeping, so the figure is the collective's own cost (see
`benchmarks/comm_overhead.py`). The reported time is the slowest rank's mean, as a collective
finishes when its last rank does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist


def time_calls(run: Callable[[], object], iters: int, warmup: int) -> float:
    """Mean seconds per call on this rank."""
    for _ in range(warmup):
        run()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        run()
    elapsed = time.perf_counter() - t0
    return elapsed / iters


def slowest_rank(seconds: float) -> float:
    """Max over ranks of a per-rank figure (float64 all_reduce MAX)."""
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())
