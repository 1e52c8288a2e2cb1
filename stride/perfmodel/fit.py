"""Fit the efficiency factors to measured throughputs by coordinate search on log error.

Few factors, bounded to physical ranges, fitted on squared log error of tokens/s: the fit
cannot invent new behaviour, only scale the terms the model already has.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from stride.perfmodel.efficiency import Efficiency

# Physical ranges: training GEMMs reach 60-100% of the best GEMM a part sustains (MAMF); published
# attention curves are met within a factor 1.5 either way; streaming kernels sustain 70-95% of
# datasheet HBM bandwidth; collectives 70-110% of the published bus bandwidth.
BOUNDS = {"gemm": (0.6, 1.0), "gemm_tpu": (0.5, 0.98), "attention": (0.2, 0.9), "flash": (0.5, 1.5),
          "memory": (0.7, 0.95), "network": (0.7, 1.1), "overlap": (0.0, 1.0), "dispatch": (0.05, 1.0)}


def fit_efficiency(samples: Sequence[tuple[Callable[[Efficiency], float], float]],
                   factors: Sequence[str] = ("gemm", "attention", "memory", "network", "overlap"),
                   start: Efficiency | None = None, sweeps: int = 3, grid: int = 15,
                   bounds: dict[str, tuple[float, float]] | None = None,
                   weights: Sequence[float] | None = None, min_step: float = 1e-3,
                   huber: float = 0.10) -> Efficiency:
    """`samples`: (predict(eff) -> tokens/s, measured tokens/s). Returns the best factors found.

    The loss is Huber on ln(pred/meas): squared within `huber` (10%), linear beyond, so one odd row
    (a source's unexplained outlier) cannot drag the factors every other row shares.
    `weights` (one per sample) let every source count equally however many rows it has;
    `sweeps=0` skips the grid and runs only the pattern search (faster, for large sets)."""
    eff = start or Efficiency()
    w = list(weights) if weights is not None else [1.0] * len(samples)

    def loss(e: Efficiency) -> float:
        total = 0.0
        for (fn, meas), wi in zip(samples, w, strict=True):
            r = abs(math.log(fn(e) / meas))
            total += wi * (r * r if r < huber else huber * (2 * r - huber))
        return total

    best = loss(eff)
    for sweep in range(sweeps):
        for name in factors:
            lo, hi = (bounds or BOUNDS)[name]
            cur = getattr(eff, name)
            span = (hi - lo) / (2 ** sweep)
            cands = [min(hi, max(lo, cur + span * (i / (grid - 1) - 0.5))) for i in range(grid)]
            for v in cands:
                if v <= 0:
                    continue
                trial = dataclasses.replace(eff, **{name: round(v, 4)})
                val = loss(trial)
                if val < best:
                    best, eff = val, trial
    # then a pattern search in log space: factors that trade off against each other (e.g. a
    # kernel's FLOP and byte terms) leave a long valley a coarse grid stops short in
    step = 0.2
    while step > min_step:
        moved = False
        for name in factors:
            lo, hi = (bounds or BOUNDS)[name]
            for sign in (1.0, -1.0):
                v = min(hi, max(lo, getattr(eff, name) * math.exp(sign * step)))
                trial = dataclasses.replace(eff, **{name: v})
                val = loss(trial)
                if val < best - 1e-15:
                    best, eff, moved = val, trial, True
                    break
        if not moved:
            step /= 2
    return dataclasses.replace(eff, **{n: round(getattr(eff, n), 4) for n in factors})
