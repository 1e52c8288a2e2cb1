"""Real market data through the same ingestion and loading path.

The series is the S&P 500 daily OHLCV file that the `arch` wheel ships inside itself (no download).
`arch` is not a stride dependency: the test skips where it is not installed. The gzip CSV path it
uses is also checked on a hand-made file of the same shape, which always runs.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import pyarrow.csv as pcsv
import pytest
import torch

from stride.config import load_config
from stride.data.build import build_data
from stride.data.ingest import ingest
from stride.data.store import open_store


def _cfg(store: Path):  # noqa: ANN202
    return load_config(overrides=[
        'data.source="store"', f'data.store="{store}"', 'data.target_column="Adj Close"', "data.seq_len=20",
        "data.horizons=[1, 5]", "data.cross_days=true", "data.val_fraction=0.2",
    ]).data


def _check(csv_gz: Path, tmp_path: Path, fmt: str | None = None) -> tuple[int, np.ndarray]:
    store = open_store(ingest(csv_gz, tmp_path / "st", time_col="Date", time_format=fmt), verify=True)
    ref = pcsv.read_csv(csv_gz)
    adj = ref["Adj Close"].to_numpy().astype(np.float32).astype(float)
    assert store.n_rows == ref.num_rows and "Adj Close" in store.columns
    bundle = build_data(_cfg(tmp_path / "st"), 32)
    src = bundle.train.source
    idx = torch.arange(len(src))
    _, y = src.gather(idx)
    end = src.end_rows(idx).numpy()
    want = np.stack([np.log(adj[end + h]) - np.log(adj[end]) for h in (1, 5)], 1) * src.target_scale.numpy()
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-6)
    x, yb = next(iter(bundle.train))
    assert x.shape == (32, 20, bundle.n_features) and torch.isfinite(x).all() and torch.isfinite(yb).all()
    return store.n_rows, store.timestamps


def test_gzip_csv_daily_bars(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    days = np.busday_offset(np.datetime64("2001-01-02"), np.arange(400), roll="forward")
    px = 100 * np.exp(np.cumsum(0.01 * rng.standard_normal(400)))
    lines = ["Date,Open,High,Low,Close,Adj Close,Volume"] + [
        f"{d},{p:.4f},{p * 1.01:.4f},{p * 0.99:.4f},{p:.4f},{p * 0.9:.6f},{int(1e6 + i)}"
        for i, (d, p) in enumerate(zip(days, px, strict=True))]
    f = tmp_path / "bars.csv.gz"
    f.write_bytes(gzip.compress("\n".join(lines).encode()))
    n, ts = _check(f, tmp_path)
    assert n == 400 and ts[0] == np.datetime64("2001-01-02", "ns").astype(np.int64)


def test_sp500_shipped_with_arch(tmp_path: Path) -> None:
    spec = importlib.util.find_spec("arch")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("`arch` is not installed: the real-data test needs its bundled sp500.csv.gz "
                    "(pip install 'arch>=7'); the same CSV path runs in test_gzip_csv_daily_bars")
    f = Path(next(iter(spec.submodule_search_locations))) / "data" / "sp500" / "sp500.csv.gz"
    if not f.is_file():
        pytest.skip(f"{f} not found in this arch version")
    n, ts = _check(f, tmp_path, "%m/%d/%Y")  # the file writes dates as 1/4/1999
    assert n > 5000
    years = ts.astype("datetime64[ns]").astype("datetime64[Y]").astype(int) + 1970
    assert years[0] == 1999 and years[-1] == 2018
