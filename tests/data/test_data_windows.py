"""Causal normalisation, split boundaries with embargo, windows inside one symbol and day, exact targets."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from data_fixtures import DAY, bars, write_parquet_dataset  # noqa: E402

from stride.config import load_config  # noqa: E402
from stride.data import normalize  # noqa: E402
from stride.data.ingest import ingest  # noqa: E402
from stride.data.normalize import derived_features, expanding_zscore, train_stats  # noqa: E402
from stride.data.splits import build_store_sources  # noqa: E402
from stride.data.store import open_store  # noqa: E402


def _cfg(store: Path, *extra: str):  # noqa: ANN202
    base = ['data.source="store"', f'data.store="{store}"', "data.seq_len=8", "data.horizons=[1, 3]",
            "data.val_fraction=0.3"]
    return load_config(overrides=base + list(extra)).data


def test_expanding_zscore_matches_float64_reference_and_chunks() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 2)) * [1.0, 50.0] + [0.0, 100.0]
    ref = np.empty_like(x)
    for t in range(len(x)):
        past = x[: t + 1]
        sd = past.std(axis=0) if t > 0 else np.ones(2)
        ref[t] = (x[t] - past.mean(axis=0)) / (sd + 1e-8)
    whole, _ = expanding_zscore(x.astype(np.float32))
    a, st = expanding_zscore(x[:100].astype(np.float32))
    b, _ = expanding_zscore(x[100:].astype(np.float32), st)
    np.testing.assert_allclose(whole, ref, atol=2e-5)
    # chunked: the second chunk's sums are of deviations from the first chunk's mean (last bits differ)
    np.testing.assert_allclose(np.concatenate([a, b]), whole, rtol=1e-6, atol=1e-6)


def _rolling_ref(x: np.ndarray, w: int) -> np.ndarray:
    """float64 loop: each row z-scored by mean and (population) std of the last w rows, fewer at the start."""
    out = np.empty_like(x)
    for t in range(len(x)):
        win = x[max(0, t - w + 1) : t + 1]
        sd = win.std(axis=0) if len(win) > 1 else np.ones(x.shape[1])
        out[t] = (x[t] - win.mean(axis=0)) / (sd + 1e-8)
    return out


def test_rolling_matches_a_float64_loop_per_symbol_across_chunks(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(normalize, "ROLLING_BLOCK", 16)  # many chunks, each row's window crossing them
    monkeypatch.setattr(normalize, "GROUP_ELEMS", 30)  # and one column per group
    rng = np.random.default_rng(3)
    n = 230
    x = np.stack([100 * np.exp(np.cumsum(1e-3 * rng.standard_normal(n))), rng.standard_normal(n),
                  5 + 2 * rng.standard_normal(n)], 1).astype(np.float32)
    starts, stops = np.array([0, 97]), np.array([97, n])  # two symbols
    for w in (2, 10, 40):
        got = np.asarray(derived_features(torch.from_numpy(x), tmp_path, "sha", [2, 0], (starts, stops), "rolling", w))
        for lo, hi in zip(starts, stops, strict=True):
            ref = _rolling_ref(x[lo:hi, [2, 0]].astype(np.float64), w)  # statistics restart per symbol
            np.testing.assert_allclose(got[lo:hi], ref, rtol=1e-5, atol=1e-5)
    # the warm-up (first w-1 rows of a symbol) is the expanding z-score of the rows so far
    exp = np.asarray(derived_features(torch.from_numpy(x), tmp_path, "sha", [2, 0], (starts, stops), "expanding"))
    np.testing.assert_allclose(got[97 : 97 + 39], exp[97 : 97 + 39], rtol=1e-5, atol=1e-5)
    assert len(list((tmp_path / "derived").glob("rolling*.f32"))) == 3  # one cache file per window (and its record)


def _welford(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expanding mean and std by Welford's recurrence in float64 (the textbook stable reference)."""
    mean, m2 = np.empty(len(x)), np.empty(len(x))
    m = q = 0.0
    for k, v in enumerate(x.tolist(), 1):
        d = v - m
        m += d / k
        q += d * (v - m)
        mean[k - 1], m2[k - 1] = m, q
    return mean, np.sqrt(m2 / np.arange(1, len(x) + 1))


def test_statistics_keep_their_digits_on_a_long_high_level_series(tmp_path: Path) -> None:
    """A price of 1e4 moving by 1e-2 over 200k rows: running sums of x and x^2 lose the variance."""
    rng = np.random.default_rng(5)
    n, w = 200_000, 500
    x = (1e4 + 1e-2 * rng.standard_normal(n)).astype(np.float32)
    x64 = x.astype(np.float64)
    mean, std = _welford(x64)
    k = np.arange(1, n + 1)
    naive_std = np.sqrt(np.maximum(np.cumsum(x64**2) / k - (np.cumsum(x64) / k) ** 2, 0))
    assert np.abs(naive_std[1000:] / std[1000:] - 1).max() > 1e-3  # the running-sum way is visibly off
    seg = (np.array([0]), np.array([n]))
    exp = np.asarray(derived_features(torch.from_numpy(x[:, None]), tmp_path, "sha", [0], seg, "expanding"))[:, 0]
    ref = (x64 - mean) / (np.where(np.arange(n) > 0, std, 1.0) + 1e-8)
    np.testing.assert_allclose(exp[1000:], ref[1000:], rtol=1e-5, atol=1e-5)
    rows = np.arange(w - 1, n, 97)  # a two-pass mean/std of each of these rows' windows
    win = x64[rows[:, None] + np.arange(-w + 1, 1)]
    rol = np.asarray(derived_features(torch.from_numpy(x[:, None]), tmp_path, "sha", [0], seg, "rolling", w))[:, 0]
    np.testing.assert_allclose(rol[rows], (x64[rows] - win.mean(1)) / (win.std(1) + 1e-8), rtol=1e-5, atol=1e-5)
    _, inv = train_stats(torch.from_numpy(x[:, None]), [(0, n)])
    assert abs(float(inv[0]) * x64.std() - 1) < 1e-6


@pytest.mark.parametrize("mode", ["expanding", "rolling", "train"])
def test_changing_a_future_value_changes_no_past_feature(tmp_path: Path, mode: str) -> None:
    t = bars("AAA")
    pq.write_table(t, tmp_path / "a.parquet")
    d = t.to_pydict()
    d["f2"][80] = 1e6  # a late row (validation part of the data)
    (tmp_path / "b").mkdir()
    pq.write_table(pa.table(d), tmp_path / "b" / "a.parquet")
    feats = []
    for name, src in (("s1", tmp_path / "a.parquet"), ("s2", tmp_path / "b")):
        extra = ["data.normalize_window=12"] if mode == "rolling" else []
        cfg = _cfg(ingest(src, tmp_path / name), f'data.normalize="{mode}"', "data.cross_days=true", *extra)
        feats.append(build_store_sources(cfg))
    idx = torch.arange(len(feats[0].train))
    x0, y0 = feats[0].train.gather(idx)
    x1, y1 = feats[1].train.gather(idx)
    torch.testing.assert_close(x0, x1, rtol=0, atol=0)  # every training window ends before row 80
    torch.testing.assert_close(y0, y1, rtol=0, atol=0)
    if mode in ("expanding", "rolling"):  # windows reading the changed row or later ones do differ
        end = feats[0].val.end_rows(torch.arange(len(feats[0].val)))
        xv0, _ = feats[0].val.gather(torch.arange(len(feats[0].val)))
        xv1, _ = feats[1].val.gather(torch.arange(len(feats[1].val)))
        changed = (xv0 != xv1).any(dim=(1, 2))
        # rolling over 12 rows: rows 80..91 see row 80; a window (8 rows) ending at e reads e-7..e
        hit = (end >= 80) if mode == "expanding" else (end >= 80) & (end - 7 <= 91)
        assert changed.any() and torch.equal(changed, hit)


def test_rolling_windows_never_read_the_warmup(tmp_path: Path) -> None:
    write_parquet_dataset(tmp_path / "src", n_days=3, per_day=40)
    st = open_store(ingest(tmp_path / "src", tmp_path / "st"))
    src = build_store_sources(_cfg(tmp_path / "st", 'data.normalize="rolling"', "data.normalize_window=50"), st)
    for s in (src.train, src.val):
        end = s.end_rows(torch.arange(len(s))).numpy()
        pos = end % 120  # row within its symbol (2 symbols x 120 rows)
        assert (pos - 7 >= 49).all()  # the history's first row is past the 49 warm-up rows
    # day 0 (rows 0..39) lies inside the warm-up; the first window ends at row 49 + 7 of day 1
    end = src.train.end_rows(torch.arange(len(src.train))).numpy()
    assert (end % 120).min() == 49 + 7 and set(np.unique((end % 120) // 40)) == {1}
    assert set(np.unique((src.val.end_rows(torch.arange(len(src.val))).numpy() % 120) // 40)) == {2}
    x, _ = src.train.gather(torch.arange(len(src.train)))
    assert torch.isfinite(x).all() and x.abs().max() < 10


def test_split_boundaries_embargo_and_no_crossing(tmp_path: Path) -> None:
    write_parquet_dataset(tmp_path / "src", n_days=3, per_day=40)
    st = open_store(ingest(tmp_path / "src", tmp_path / "st"))
    ts, h, T, emb = st.timestamps, 3, 8, 5
    src = build_store_sources(_cfg(tmp_path / "st", f"data.embargo={emb}", "data.test_fraction=0.2"), st)
    sym = np.repeat(np.arange(2), 120)
    day = ts // DAY
    cut_rows = {}
    for split in ("train", "val", "test"):
        s = getattr(src, split)
        end = s.end_rows(torch.arange(len(s))).numpy()
        assert len(np.unique(end)) == len(end)
        rows = end[:, None] + np.arange(-T + 1, h + 1)  # history and target rows
        assert (sym[rows] == sym[rows[:, :1]]).all() and (day[rows] == day[rows[:, :1]]).all()
        cut_rows[split] = end
    for s in range(2):  # per symbol: last train target row + embargo < first val end, same for test
        lo, hi = s * 120, (s + 1) * 120
        tr, va, te = (e[(e >= lo) & (e < hi)] for e in cut_rows.values())
        assert tr.max() + h < va.min() and va.min() - (tr.max() + h) >= emb
        assert va.max() + h < te.min() and te.min() - (va.max() + h) >= emb
        assert ts[tr.max() + h] < ts[va.min()]
    n = {k: len(v) for k, v in cut_rows.items()}
    # 3 days x 40 rows per symbol: each day run holds 40-8+1-3 = 30 ends; the cuts and embargo take the rest.
    assert sum(n.values()) < 2 * 3 * 30 and n["train"] > n["val"] > 0 and n["test"] > 0


def test_targets_are_scaled_forward_log_returns(tmp_path: Path) -> None:
    tables = write_parquet_dataset(tmp_path / "src")
    src = build_store_sources(_cfg(ingest(tmp_path / "src", tmp_path / "st"), 'data.normalize="none"'))
    idx = torch.arange(0, len(src.train), 7)
    x, y = src.train.gather(idx)
    end = src.train.end_rows(idx).numpy()
    # the store holds float32 prices; the reference takes logs of those in float64
    close = np.concatenate([tables[s]["close"].to_numpy() for s in ("AAA", "BBB")]).astype(np.float32).astype(float)
    ref = np.stack([np.log(close[end + k]) - np.log(close[end]) for k in (1, 3)], 1) * src.train.target_scale.numpy()
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-6)
    raw = np.concatenate([np.stack([tables[s][c].to_numpy() for c in ("close", "f1", "f2")], 1)
                          for s in ("AAA", "BBB")])
    np.testing.assert_array_equal(x.numpy(), raw[end[:, None] + np.arange(-7, 1)].astype(np.float32))
    # the target scale is 1/std over training windows: scaled targets have unit std there
    _, yall = src.train.gather(torch.arange(len(src.train)))
    assert abs(float(yall[:, 0].std()) - 1) < 0.05


def test_train_normalisation_uses_train_rows_only(tmp_path: Path) -> None:
    write_parquet_dataset(tmp_path / "src")
    st = open_store(ingest(tmp_path / "src", tmp_path / "st"))
    src = build_store_sources(_cfg(tmp_path / "st", 'data.columns=["f2", "f1"]'), st)
    rows = np.unique(np.concatenate([np.arange(lo - 7, hi) for lo, hi in src.ranges["train"]]))
    raw = st.values.numpy()[:, [2, 1]].astype(np.float64)
    mean, std = raw[rows].mean(0), raw[rows].std(0)
    x, _ = src.train.gather(torch.tensor([0]))
    e = int(src.train.end_rows(torch.tensor([0])))
    np.testing.assert_allclose(x[0].numpy(), (raw[e - 7 : e + 1] - mean) / std, rtol=1e-4, atol=1e-5)
