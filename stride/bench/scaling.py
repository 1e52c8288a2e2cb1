"""Scaling arithmetic: which runs a world-size sweep needs, and what efficiency each one shows.

Weak scaling keeps the per-rank batch fixed (the global batch grows with N); strong scaling keeps the
global batch fixed (each rank gets 1/N of it). With X(N) the global throughput at N ranks:

    weak efficiency   = (X(N) / N) / X(1)     per-rank throughput at N over one rank's
    strong efficiency = X(N) / (N * X(1))     speed-up over the ideal N-fold speed-up
    speed-up          = X(N) / X(1)

The two formulas are the same quotient; what differs is the work each rank does (weak: the same
batch; strong: a smaller one, so fixed per-step costs weigh more). 1 - efficiency is every second
the N-rank step spends beyond the ideal: exposed communication, contention for cores and memory,
and per-step overheads that do not shrink with the batch. `exposed_comm_fraction` (DDP, from the
trainer's timed communication hook) says how much of that is the step waiting on communication.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from stride.bench.stats import spread
from stride.config.errors import ConfigError, suggest

SCALINGS = ("weak", "strong")
# Strategy -> the [parallel] degree that runs it over N ranks.
STRATEGIES = {"ddp": "parallel.dp_replicate", "fsdp": "parallel.dp_shard"}


@dataclass(frozen=True)
class Point:
    """One run of a sweep: a strategy at a world size, weak or strong (the 1-rank run is the baseline)."""

    strategy: str  # ddp | fsdp | single (the baseline)
    scaling: str  # weak | strong | baseline
    world_size: int
    global_batch: int

    @property
    def per_rank_batch(self) -> int:
        return self.global_batch // self.world_size

    @property
    def is_baseline(self) -> bool:
        return self.scaling == "baseline"

    @property
    def label(self) -> str:
        return "n1" if self.is_baseline else f"{self.strategy}-{self.scaling}-n{self.world_size}"

    def overrides(self) -> list[str]:
        out = [f"train.batch_size={self.global_batch}"]
        if not self.is_baseline:
            out.append(f"{STRATEGIES[self.strategy]}={self.world_size}")
        return out


def parse_list(values: list[str] | None, what: str) -> list[str]:
    """`--x 1,2,4` and `--x 1 2 4` alike."""
    out = [v.strip() for raw in values or [] for v in raw.split(",") if v.strip()]
    if not out:
        raise ConfigError(f"{what}: give at least one value")
    return out


def plan_points(batch: int, world_sizes: list[int], strategies: list[str], scalings: list[str]) -> list[Point]:
    """The baseline (1 rank, the workload's batch) first, then each strategy x scaling x N > 1."""
    for s in strategies:
        if s not in STRATEGIES:
            raise ConfigError(f"--strategies: {s!r} is not a strategy{suggest(s, list(STRATEGIES))}; "
                              f"strategies are {', '.join(STRATEGIES)}")
    for s in scalings:
        if s not in SCALINGS:
            raise ConfigError(f"--scaling: {s!r} is not weak or strong{suggest(s, list(SCALINGS))}")
    for n in world_sizes:
        if n < 1:
            raise ConfigError(f"--world-sizes: {n} is not a process count (need >= 1)")
    points = [Point("single", "baseline", 1, batch)]
    for n in sorted(set(world_sizes) - {1}):
        for strategy in dict.fromkeys(strategies):
            for scaling in dict.fromkeys(scalings):
                if scaling == "strong" and batch % n:
                    raise ConfigError(f"--scaling strong at world size {n}: the global batch {batch} does not "
                                      f"split into {n} equal per-rank batches (choose a batch divisible by {n})")
                points.append(Point(strategy, scaling, n, batch * n if scaling == "weak" else batch))
    return points


def weak_efficiency(per_rank_throughput_n: float, throughput_1: float) -> float:
    """Per-rank throughput at N ranks over the throughput of one rank with the same per-rank batch."""
    return per_rank_throughput_n / throughput_1


def strong_efficiency(throughput_n: float, n: int, throughput_1: float) -> float:
    """Throughput at N ranks over N times one rank's, for the same global batch."""
    return throughput_n / (n * throughput_1)


def efficiency(p: Point, throughput_n: float, throughput_1: float) -> float:
    if p.is_baseline:
        return 1.0
    if p.scaling == "weak":
        return weak_efficiency(throughput_n / p.world_size, throughput_1)
    return strong_efficiency(throughput_n, p.world_size, throughput_1)


def _median(values: list[float | None]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return statistics.median(vals) if vals else None


def point_record(workload: str, p: Point, unit: str, throughputs: list[float], summaries: list[dict[str, Any]],
                 base_throughputs: list[float], base_summaries: list[dict[str, Any]], base_batch: int,
                 cores: int, entry: str) -> dict[str, Any]:
    """One point of results.json's `scaling` section from its repeats and the baseline's repeats.

    Repeat k of every point ran in round k; `efficiency_rounds` pairs each point's run with the
    baseline run of the same round, so slow periods on a shared machine cancel within a pair.
    """
    tput = spread(throughputs)
    base = statistics.median(base_throughputs)
    eff_rounds = [efficiency(p, x, b) for x, b in zip(throughputs, base_throughputs, strict=False)]
    phases = list(dict.fromkeys(k for s in summaries for k in s.get("step_time_breakdown_s", {})))
    breakdown = {k: _median([s["step_time_breakdown_s"].get(k) for s in summaries]) or 0.0 for k in phases}
    fwd = breakdown.get("forward")
    fwd1 = _median([s.get("step_time_breakdown_s", {}).get("forward") for s in base_summaries])
    # Forward carries no gradient communication under DDP: its time per sample against one rank's is
    # contention (cores, memory bandwidth, other processes), plus, for models with buffers (RoPE tables),
    # the wait in DDP's pre-forward buffer broadcast, a synchronisation point that absorbs rank skew.
    fwd_ratio = (fwd / p.per_rank_batch) / (fwd1 / base_batch) if fwd and fwd1 else None
    return {
        "workload": workload, "strategy": p.strategy, "scaling": p.scaling, "world_size": p.world_size,
        "per_rank_batch": p.per_rank_batch, "global_batch": p.global_batch, "entry": entry,
        "throughput": {"unit": unit, **tput},
        "per_rank_throughput": tput["median"] / p.world_size if tput["median"] else None,
        "speedup": tput["median"] / base if tput["median"] and base else None,
        "efficiency": efficiency(p, tput["median"], base) if tput["median"] and base else None,
        "efficiency_rounds": eff_rounds,
        "exposed_comm_fraction": _median([s.get("exposed_comm_fraction") for s in summaries]),
        "comm_exposed_s": _median([s.get("comm_exposed_s") for s in summaries]),
        "comm_hidden_s": _median([s.get("comm_hidden_s") for s in summaries]),
        "step_time_s": _median([s.get("step_time_s") for s in summaries]),
        "step_time_breakdown_s": breakdown,
        "forward_time_per_sample_ratio": fwd_ratio,
        # ready to run but no core (other processes, or oversubscription), over each rank's life
        "runqueue_wait_share": _median([s.get("runqueue_wait_share") for s in summaries]),
        "launch_retries": sum(len(s.get("launch_retries") or []) for s in summaries),
        "cores": cores,
        "ranks_per_core": p.world_size / cores,
        "oversubscribed": p.world_size > cores,
    }


def oversubscribed_entries(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{entry name: its scaling point} for the world-sweep points with more ranks than cores."""
    points = (results.get("scaling") or {}).get("points") or []
    return {p["entry"]: p for p in points if p.get("oversubscribed") and isinstance(p.get("entry"), str)}


HOST_MFU_NOTE = ("host peak: an oversubscribed point's MFU is the whole job's FLOP/s over the peak of the cores the "
                 "host has (each rank's own MFU divides by a core each, cores the host does not have)")


def host_mfu_note(results: dict[str, Any]) -> str | None:
    """HOST_MFU_NOTE where a table shows an oversubscribed point's MFU over the host's peak (`host_mfu`), else None:
    the one caption `stride bench`'s table and the report's both print."""
    over = oversubscribed_entries(results)
    return HOST_MFU_NOTE if any(w["mfu"] is not None for w in results["workloads"] if w["name"] in over) else None


def host_mfu(mfu: float | None, point: dict[str, Any]) -> float | None:
    """An oversubscribed point's MFU over the peak of the cores the host has: the whole job's achieved FLOP/s over
    `cores` cores' peak. Each rank's MFU divides its FLOP/s by one core's peak (a rank runs one intra-op thread), so
    N ranks' MFUs assume N cores; on fewer, the job's FLOP/s over the host's peak is mfu x N / cores (4 ranks on 2
    cores: a rank's 3.3 % is the host's 6.7 %). None where the figures are missing."""
    n, cores = point.get("world_size"), point.get("cores")
    if mfu is None or not isinstance(n, int) or not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
        return None
    return mfu * n / cores
