"""Small market tables written as files, for the data tests (float64 references kept)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

T0 = np.datetime64("2024-01-02T14:30", "ns").astype(np.int64)
MIN = 60 * 10**9
DAY = 86_400 * 10**9


def bars(symbol: str, n_days: int = 2, per_day: int = 50, seed: int = 0) -> pa.Table:
    """Minute bars for one symbol: timestamp, symbol, close (a positive random walk), f1, f2."""
    rng = np.random.default_rng(seed)
    ts = (T0 + np.arange(n_days)[:, None] * DAY + np.arange(per_day)[None] * MIN).reshape(-1)
    close = 100 * np.exp(np.cumsum(1e-3 * rng.standard_normal(len(ts))))
    return pa.table({
        "timestamp": pa.array(ts, pa.timestamp("ns")),
        "symbol": [symbol] * len(ts),
        "close": close,
        "f1": rng.standard_normal(len(ts)),
        "f2": 5 + 2 * rng.standard_normal(len(ts)),
    })


def write_parquet_dataset(root: Path, symbols: tuple[str, ...] = ("AAA", "BBB"), **kw: int) -> dict[str, pa.Table]:
    """One Parquet file per (date, symbol), hive-style folders, like `stride data synth` writes."""
    tables = {}
    for k, s in enumerate(symbols):
        t = bars(s, seed=k, **kw)
        tables[s] = t
        days = t.column("timestamp").to_numpy().astype("datetime64[D]")
        for d in np.unique(days):
            part = root / f"date={d}" / f"symbol={s}"
            part.mkdir(parents=True, exist_ok=True)
            pq.write_table(t.filter(pa.array(days == d)), part / "part-0.parquet")
    return tables


class Ids:
    """A window source whose batch is the window ids themselves (so tests see exactly which windows)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return idx.clone(), idx.float()[:, None]

