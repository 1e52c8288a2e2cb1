"""Alpha-beta fit of a collective's time: t(bytes) = alpha + beta * bytes, by relative least squares.

Residuals are weighted by 1/t so the small sizes (which set alpha) count as much as the large ones
(which set beta); a plain fit would let the largest message decide both. Both parameters are kept
non-negative (a latency or an inverse bandwidth below zero has no meaning; noisy small sweeps can
produce one): when the free fit has one negative, that one is fixed at 0 and the other refitted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class AlphaBeta:
    alpha_us: float  # latency: time of a zero-byte message
    beta_us_per_byte: float  # inverse bandwidth
    r2: float  # coefficient of determination of the fitted line on the measured times
    n_points: int

    @property
    def bandwidth_GBps(self) -> float | None:
        return 1e-3 / self.beta_us_per_byte if self.beta_us_per_byte > 0 else None


def _wls(cols: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    coef, *_ = np.linalg.lstsq(cols * w[:, None], y * w, rcond=None)
    return coef


def fit_alpha_beta(nbytes: list[int] | np.ndarray, time_us: list[float] | np.ndarray) -> AlphaBeta:
    x = np.asarray(nbytes, dtype=np.float64)
    y = np.asarray(time_us, dtype=np.float64)
    if len(x) != len(y):
        raise ValueError(f"alpha-beta fit: {len(x)} sizes but {len(y)} times")
    if len(np.unique(x)) < 2:
        raise ValueError(f"alpha-beta fit needs at least 2 distinct sizes, got {len(np.unique(x))}")
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("alpha-beta fit: times must be positive and finite")
    w = 1.0 / y
    alpha, beta = _wls(np.stack([np.ones_like(x), x], axis=1), y, w)
    if beta < 0:
        alpha, beta = float(_wls(np.ones((len(x), 1)), y, w)[0]), 0.0
    elif alpha < 0:
        alpha, beta = 0.0, float(_wls(x[:, None], y, w)[0])
    pred = alpha + beta * x
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return AlphaBeta(float(alpha), float(beta), r2, len(x))
