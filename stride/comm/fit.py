"""Alpha-beta fit of a collective's time: t(bytes) = alpha + beta * bytes, by relative least squares.

Residuals are weighted by 1/t so the small sizes (which set alpha) count as much as the large ones
(which set beta); a plain fit would let the largest message decide both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class AlphaBeta:
    alpha_us: float  # latency: time of a zero-byte message
    beta_us_per_byte: float  # inverse bandwidth
    r2: float  # coefficient of determination of the weighted fit
    n_points: int

    @property
    def bandwidth_GBps(self) -> float | None:
        return 1e-3 / self.beta_us_per_byte if self.beta_us_per_byte > 0 else None


def fit_alpha_beta(nbytes: list[int] | np.ndarray, time_us: list[float] | np.ndarray) -> AlphaBeta:
    x = np.asarray(nbytes, dtype=np.float64)
    y = np.asarray(time_us, dtype=np.float64)
    if len(x) < 2 or len(np.unique(x)) < 2:
        raise ValueError(f"alpha-beta fit needs at least 2 distinct sizes, got {len(np.unique(x))}")
    if np.any(y <= 0):
        raise ValueError("alpha-beta fit: times must be positive")
    w = 1.0 / y
    a = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    coef, *_ = np.linalg.lstsq(a, y * w, rcond=None)
    pred = a @ coef
    ss_res = float(np.sum((y * w - pred) ** 2))
    ss_tot = float(np.sum((y * w - np.mean(y * w)) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return AlphaBeta(float(coef[0]), float(coef[1]), r2, len(x))
