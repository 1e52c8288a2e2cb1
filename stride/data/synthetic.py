"""In-process synthetic market: multi-asset returns with fat tails, volatility clustering and a weak signal.

Why not random noise: the default workload must have something to learn (so "the loss falls" is a
real check) while looking like market data (GARCH volatility, Student-t shocks, a common factor,
intraday seasonality). Deterministic by seed. The full simulator (order book, Parquet output)
belongs to the data pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FEATURES = ("ret", "abs_ret", "log_vol", "signal", "log_volume", "tod_sin", "tod_cos")
MINUTES_PER_DAY = 390


@dataclass
class MarketSeries:
    """features [A, N, F] float32 (causal: each row uses data up to its timestep), returns [A, N],
    vol [A, N]: the causal EWMA volatility at each step, known at t (used to scale targets)."""

    features: np.ndarray
    returns: np.ndarray
    vol: np.ndarray
    feature_names: tuple[str, ...] = FEATURES


def _student_t(rng: np.random.Generator, df: float, size: tuple[int, ...]) -> np.ndarray:
    """Unit-variance Student-t shocks (fat tails)."""
    return rng.standard_t(df, size=size) / np.sqrt(df / (df - 2))


def generate_market(
    n_assets: int,
    n_steps: int,
    seed: int = 0,
    *,
    market_corr: float = 0.3,
    garch: tuple[float, float, float] = (0.02, 0.08, 0.90),
    signal_strength: float = 0.3,
    signal_ar: float = 0.9,
    tail_df: float = 5.0,
) -> MarketSeries:
    rng = np.random.default_rng(seed)
    a, n = n_assets, n_steps
    shocks = np.sqrt(market_corr) * _student_t(rng, tail_df, (1, n)) + np.sqrt(1 - market_corr) * _student_t(
        rng, tail_df, (a, n)
    )
    # AR(1) order-flow-like signal with unit variance; it predicts the next return's sign.
    e = rng.standard_normal((a, n)) * np.sqrt(1 - signal_ar**2)
    sig = np.empty((a, n))
    sig[:, 0] = rng.standard_normal(a)
    for t in range(1, n):
        sig[:, t] = signal_ar * sig[:, t - 1] + e[:, t]
    tod = (np.arange(n) % MINUTES_PER_DAY) / MINUTES_PER_DAY
    season = 1.0 + 0.6 * (2 * tod - 1) ** 2  # U-shaped intraday volatility
    omega, alpha, beta = garch
    var = np.full(a, omega / (1 - alpha - beta))
    ret = np.empty((a, n))
    cond_vol = np.empty((a, n))
    eps_prev = np.zeros(a)
    noise_scale = np.sqrt(1 - signal_strength**2)
    for t in range(n):
        var = omega + alpha * eps_prev**2 + beta * var
        vol = np.sqrt(var) * season[t]
        sig_prev = sig[:, t - 1] if t else np.zeros(a)
        z = signal_strength * sig_prev + noise_scale * shocks[:, t]
        ret[:, t] = 1e-3 * vol * z
        cond_vol[:, t] = vol
        eps_prev = np.sqrt(var) * shocks[:, t]
    # Causal features: an EWMA of squared returns up to t normalises returns.
    ewma = np.empty((a, n))
    acc = np.full(a, (1e-3) ** 2)
    lam = 0.97
    for t in range(n):
        acc = lam * acc + (1 - lam) * ret[:, t] ** 2
        ewma[:, t] = acc
    ewma_vol = np.sqrt(ewma)
    norm_ret = ret / ewma_vol
    volume = np.exp(0.5 * np.log(cond_vol) + 0.3 * rng.standard_normal((a, n)))
    feats = np.stack(
        [
            norm_ret,
            np.abs(norm_ret),
            np.log(ewma_vol / 1e-3),
            sig,
            np.log(volume),
            np.broadcast_to(np.sin(2 * np.pi * tod), (a, n)),
            np.broadcast_to(np.cos(2 * np.pi * tod), (a, n)),
        ],
        axis=-1,
    ).astype(np.float32)
    return MarketSeries(features=np.ascontiguousarray(feats), returns=ret, vol=ewma_vol)


def market_bytes(n_assets: int, n_steps: int, n_horizons: int) -> tuple[int, int]:
    """(peak, kept): bytes `generate_market` and `forward_targets` hold at their peak, and what a run keeps after.

    Counted per (asset, step) cell, so a config is checked before anything is allocated (stride.train.resources).
    Peak: `generate_market`'s nine float64 series alive at the final `np.stack`, the stacked float64 features and
    their float32 copy, (9 + 7) x 8 + 7 x 4 = 156 B (measured by max RSS: 157-169 B with 3 horizons, 32 x 100000,
    256 x 20000 and 4 x 800000 cells). Kept: float32 features and targets, the int64 (asset, t) window ends and the
    int32 batch order, 28 + 4 H + 16 + 4 B (measured 57-95 B with H = 3: the allocator keeps some freed pages).
    """
    cells = n_assets * n_steps
    f = len(FEATURES)
    peak = (9 + f) * 8 + f * 4
    kept = 4 * f + 4 * n_horizons + 16 + 4
    return cells * max(peak, kept), cells * kept


def forward_targets(returns: np.ndarray, horizons: list[int], vol: np.ndarray | None = None) -> np.ndarray:
    """[A, N, H]: sum of the next h returns after t over sqrt(h) * vol[t] (volatility-scaled, as quants
    train on; `vol` must be known at t). Without `vol`, each asset's return std is the scale.

    Rows whose horizon runs past the end are NaN; window sampling never picks them.
    """
    a, n = returns.shape
    csum = np.concatenate([np.zeros((a, 1)), np.cumsum(returns, axis=1)], axis=1)
    scale = returns.std(axis=1, keepdims=True) if vol is None else vol[:, : n]
    out = np.full((a, n, len(horizons)), np.nan, dtype=np.float32)
    for j, h in enumerate(horizons):
        fwd = csum[:, 1 + h :] - csum[:, 1 : n + 1 - h]  # sum r[t+1..t+h] for t in [0, n-h)
        sc = scale if vol is None else scale[:, : n - h]
        out[:, : n - h, j] = fwd / (sc * np.sqrt(h))
    return out
