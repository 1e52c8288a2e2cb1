"""The market simulator: deterministic, stylised facts present, book consistent with mid, streamed by day."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from stride.data.ingest import ingest
from stride.data.simulator import MarketSimulator, parse_freq, synthesize
from stride.data.store import open_store


def _log_returns(sim: MarketSimulator) -> np.ndarray:
    return np.concatenate([np.diff(np.log(cols["mid"]), axis=1) for _, _, cols in sim.days()], axis=1)


def test_layout_determinism_and_book(tmp_path: Path) -> None:
    info = synthesize(tmp_path / "a", n_assets=3, n_days=2, freq="5min", seed=3, levels=3)
    synthesize(tmp_path / "b", n_assets=3, n_days=2, freq="5min", seed=3, levels=3)
    assert info == {"files": 6, "rows": 6 * 78, "assets": 3, "days": 2, "bars_per_day": 78}
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.parquet"))
    assert str(files[0]) == "date=2024-01-02/symbol=S000/part-0.parquet" and len(files) == 6
    for f in files:
        assert pq.read_table(tmp_path / "a" / f).equals(pq.read_table(tmp_path / "b" / f))
    t = pq.read_table(tmp_path / "a" / files[0]).to_pydict()
    bid = np.array([t[f"bid_px_{k}"] for k in (1, 2, 3)])
    ask = np.array([t[f"ask_px_{k}"] for k in (1, 2, 3)])
    mid = np.array(t["mid"])
    np.testing.assert_allclose(mid, (bid[0] + ask[0]) / 2, rtol=0, atol=1e-9)
    assert (np.diff(bid, axis=0) < 0).all() and (np.diff(ask, axis=0) > 0).all() and (ask[0] > bid[0]).all()
    np.testing.assert_allclose(np.round(bid / 0.01), bid / 0.01, atol=1e-6)  # on the tick grid
    assert (np.array(t["high"]) >= np.maximum(t["open"], t["close"])).all()
    assert (np.array(t["low"]) <= np.minimum(t["open"], t["close"])).all()
    st = open_store(ingest(tmp_path / "a", tmp_path / "st"))
    assert st.n_rows == 6 * 78 and [r["symbol"] for r in st.manifest["symbols"]] == ["S000", "S001", "S002"]


def test_stylised_facts() -> None:
    sim = MarketSimulator(8, 20, "1min", seed=0)
    r = _log_returns(sim)  # [8, 20 * 389] (within-day returns)
    corr = np.corrcoef(r)
    assert 0.15 < corr[np.triu_indices(8, 1)].mean() < 0.8  # correlated
    z = (r - r.mean(1, keepdims=True)) / r.std(1, keepdims=True)
    assert (z**4).mean() > 4.0  # fat tails (a Gaussian gives 3)
    a = np.abs(r[:, 1:]).ravel() - np.abs(r).mean()
    b = np.abs(r[:, :-1]).ravel() - np.abs(r).mean()
    assert (a * b).mean() / (a.std() * b.std()) > 0.05  # volatility clustering
    per_bar = np.abs(r).reshape(8, 20, 389).mean(axis=(0, 1))
    assert per_bar[:30].mean() > 1.3 * per_bar[170:220].mean() and per_bar[-30:].mean() > 1.3 * per_bar[170:220].mean()


def test_memory_is_one_day_not_the_dataset(tmp_path: Path) -> None:
    peaks = []
    for days in (2, 8):
        tracemalloc.start()
        synthesize(tmp_path / f"d{days}", n_assets=4, n_days=days, freq="1min")
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < 1.25 * peaks[0]  # 4x the data, about the same peak


def test_bad_frequency() -> None:
    assert parse_freq("1min") == 60 and parse_freq("30s") == 30
    with pytest.raises(ValueError, match="does not divide"):
        parse_freq("7min")
    with pytest.raises(ValueError, match="expected a number and a unit"):
        parse_freq("fast")
