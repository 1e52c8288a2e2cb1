"""Spread of repeated measurements: median, min, max and coefficient of variation."""

from __future__ import annotations

import statistics


def spread(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"median": None, "min": None, "max": None, "cv": None, "n": 0}
    mean = statistics.fmean(values)
    cv = statistics.pstdev(values) / mean if len(values) > 1 and mean else 0.0
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "cv": cv, "n": len(values)}
