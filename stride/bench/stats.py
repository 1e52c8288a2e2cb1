"""Spread of repeated measurements: median, min, max and coefficient of variation."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable


def spread(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"median": None, "min": None, "max": None, "cv": None, "n": 0}
    mean = statistics.fmean(values)
    # one value has no spread: its cv is null, not 0 (which would read as a perfectly steady measurement)
    cv = statistics.pstdev(values) / mean if len(values) > 1 and mean else None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "cv": cv, "n": len(values)}


# 1.4826 x the median absolute deviation estimates a normal spread's sd, and one preempted step moves it little
MAD_TO_SD = 1.4826


def step_cv(rates: list[float]) -> float | None:
    """The spread of one run's per-step rates, as a cv: 1.4826 x MAD / median (robust: one preempted step of 926
    samples/s among 1,720s made 3 windows of 2 logged steps read a cv of 19 %), at most the plain population cv (so
    it never exceeds what the rates' min and max allow). None for fewer than 3 rates."""
    if len(rates) < 3:
        return None
    med = statistics.median(rates)
    mad = statistics.median([abs(r - med) for r in rates])
    return min(MAD_TO_SD * mad / med, statistics.pstdev(rates) / statistics.fmean(rates))


def one_run(t: dict) -> bool:
    """Whether a throughput is one measurement (n 1, or an older file's cv 0 with min = max): its cv says nothing."""
    return t.get("n") == 1 or (t.get("n") is None and t.get("cv") == 0.0 and t.get("min") == t.get("max"))


def spread_text(t: dict) -> str:
    """A throughput's cv for a table, or "1 run" where there is one measurement (its cv of 0 says nothing)."""
    if one_run(t):
        return "1 run"
    return "-" if t.get("cv") is None else f"{100 * t['cv']:.1f}%"


def bootstrap_ci(values: list[float], stat: Callable[[list[float]], float] = statistics.median, level: float = 0.95,
                 resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of `stat` over `values` (resampled with replacement, fixed seed).

    For paired ratios from a noisy machine: no normality assumed, and a fixed seed makes the
    interval itself reproducible from the same measurements.
    """
    if not values:
        raise ValueError("bootstrap_ci of no values")
    rng = random.Random(seed)
    n = len(values)
    stats = sorted(stat([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    lo = stats[int((1 - level) / 2 * (resamples - 1))]
    hi = stats[int((1 + level) / 2 * (resamples - 1))]
    return lo, hi
