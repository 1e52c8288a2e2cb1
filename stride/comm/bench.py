"""The benchmark run on every rank: for each collective and size, check the result, then time it."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

import torch.distributed as dist

from stride.comm.collectives import COLLECTIVES, ELEM, Prepared
from stride.comm.timing import slowest_rank, time_calls


@dataclass
class Row:
    collective: str
    bytes: int
    count: int  # nccl-tests' "count": float32 elements per rank where the buffer is split (Collective.shown_count)
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    correct: bool
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def iters_for(nbytes: int, iters: int, budget_bytes: int) -> int:
    """Fewer iterations for big messages, so a sweep stays bounded: at most `budget_bytes` per size."""
    return max(1, min(iters, budget_bytes // max(nbytes, 1)))


def run_benchmark(collectives: list[str], sizes: list[int], iters: int, warmup: int,
                  budget_bytes: int = 1 << 31, repeats: int = 1) -> list[Row]:
    """One row per collective and size; `repeats` > 1 times the batch of `iters` calls that many times and takes the
    median batch (each the slowest rank's mean): on a shared 2-core host one batch of a 2-rank gloo all-reduce moved
    by +-0.5 ms between sizes, and the fit that separates start-up from bandwidth was left out as noise."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        raise RuntimeError(f"stride comm needs at least 2 ranks, got world size {world}")
    rows: list[Row] = []
    for name in collectives:
        coll = COLLECTIVES[name]
        for nbytes in sizes:
            if nbytes < coll.min_bytes(world):
                continue  # too small to split over the ranks (the CLI names these sizes)
            count = coll.count_for(nbytes, world)
            real_bytes = count * ELEM
            p = Prepared(name, count, rank, world)
            err = p.check()
            # every rank must agree the result was right
            bad = slowest_rank(1.0 if err else 0.0) > 0
            n_it = iters_for(real_bytes, iters, budget_bytes)
            # the warm-up bounded by the byte budget alone, as the timed calls are; min(warmup, n_it) also capped it
            # at --iters (`--iters 1 --warmup 5` warmed up once)
            n_warm = iters_for(real_bytes, warmup, budget_bytes) if warmup > 0 else 0
            sec = statistics.median(slowest_rank(time_calls(p.run, n_it, n_warm if k == 0 else 0))
                                    for k in range(max(1, repeats)))
            algbw = real_bytes / sec / 1e9
            rows.append(Row(name, real_bytes, coll.shown_count(count, world), sec * 1e6, algbw,
                            algbw * coll.bus_factor(world), not bad,
                            err if err else ("wrong result on another rank" if bad else None)))
    return rows
