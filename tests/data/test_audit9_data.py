"""Audit 9 #3-#6: a derived-feature cache is keyed by the symbol runs too (two read-only stores with byte-identical
values.bin but other symbol boundaries shared one `expanding` cache: one symbol z-scored with another's rows, the
future included), and older keys are never read; file names whose stem suffixes name instruments (`CL.F24.csv` +
`CL.G24.csv`, `BRK.A.csv` + `BRK.B.csv`) are refused, naming the symbol, the files and the fix, where they were
stitched into one series (or failed with "timestamp out of order"); a bfloat16 target column says once that its
targets are mostly 0."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np
import pytest

from stride.cli.main import main
from stride.config import load_config
from stride.data import normalize
from stride.data.ingest import IngestError, ingest
from stride.data.normalize import derived_features
from stride.data.splits import build_store_sources
from stride.data.store import open_store

T0 = np.datetime64("2024-01-02T14:31", "s")


def _csv(path: Path, values: np.ndarray, start: int = 0, symbol: str | None = None) -> None:
    """Minute bars from 14:31 (+start minutes): timestamp, [symbol,] close, x."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = "timestamp," + ("symbol," if symbol else "") + "close,x"
    sym = f"{symbol}," if symbol else ""
    rows = [f"{T0 + np.timedelta64(start + i, 'm')},{sym}{float(v[0])!r},{float(v[1])!r}" for i, v in enumerate(values)]
    path.write_text("\n".join([head, *rows]) + "\n")


def _values(n: int = 200, seed: int = 0) -> np.ndarray:
    """[n, 2] float32-exact values: a positive price walk and noise."""
    rng = np.random.default_rng(seed)
    price = 100 * np.exp(np.cumsum(1e-3 * rng.standard_normal(n)))
    return np.stack([price, rng.standard_normal(n)], 1).astype(np.float32).astype(np.float64)


def _symbols(store: Path) -> dict[str, int]:
    return {r["symbol"]: r["stop"] - r["start"] for r in open_store(store).manifest["symbols"]}


def _expanding_reference(x: np.ndarray, runs: list[tuple[int, int]]) -> np.ndarray:
    """Per-symbol expanding z-score in float64, row by row (the row itself included)."""
    z = np.zeros_like(x)
    for lo, hi in runs:
        for i in range(lo, hi):
            past = x[lo : i + 1]
            std = past.std(0) if i > lo else np.ones(x.shape[1])
            z[i] = (x[i] - past.mean(0)) / (std + normalize.EPS)
    return z


@pytest.fixture
def twin_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, np.ndarray]:
    """The audit's pair: x/Z.csv one symbol of 200 rows; y/A.csv + y/B.csv the same 200 values as two symbols;
    both read-only (derived_writable patched: tests may run as root) with one user cache folder."""
    v = _values()
    _csv(tmp_path / "x" / "Z.csv", v)
    _csv(tmp_path / "y" / "A.csv", v[:100])
    _csv(tmp_path / "y" / "B.csv", v[100:])
    sx, sy = ingest(tmp_path / "x", tmp_path / "sx"), ingest(tmp_path / "y", tmp_path / "sy")
    assert (sx / "values.bin").read_bytes() == (sy / "values.bin").read_bytes()  # the premise: one checksum
    monkeypatch.setenv("STRIDE_CACHE_DIR", str(tmp_path / "ucache"))
    monkeypatch.setattr(normalize, "derived_writable", lambda path: False)
    return sx, sy, v


def _derived(store_path: Path, mode: str, window: int = 0) -> np.ndarray:
    store = open_store(store_path)
    sha = store.manifest["files"]["values.bin"]["sha256"]
    return np.asarray(derived_features(store.values, store_path, sha, [0, 1], store.segments(), mode, window))


def test_a_cache_of_other_symbol_runs_is_never_reused(twin_stores: tuple[Path, Path, np.ndarray]) -> None:
    sx, sy, v = twin_stores
    assert np.allclose(_derived(sx, "expanding"), _expanding_reference(v, [(0, 200)]), atol=1e-5)
    got = _derived(sy, "expanding")  # was sx's file: B's first row z-scored with all of A's rows
    ref = _expanding_reference(v, [(0, 100), (100, 200)])
    assert np.allclose(got, ref, atol=1e-5), np.abs(got - ref).max()
    assert got[100, 0] == 0.0  # a symbol's first row: nothing before it
    w = 10
    rol = _derived(sy, "rolling", w)[100 + w - 1 :]  # past the warm-up, the rows windows read
    ref_rol = [(v[i] - v[i - w + 1 : i + 1].mean(0)) / (v[i - w + 1 : i + 1].std(0) + normalize.EPS)
               for i in range(100 + w - 1, 200)]
    _derived(sx, "rolling", w)  # the other store's rolling cache too, in the same folder
    assert np.allclose(_derived(sy, "rolling", w)[100 + w - 1 :], rol) and np.allclose(rol, ref_rol, atol=1e-5)
    cached = sorted(p.name for p in (Path(normalize.user_cache_dir()) / "derived").rglob("*.f32"))
    assert len(cached) == 4, cached  # one file per (store runs, mode)


def test_a_cache_of_the_previous_key_format_is_not_read(twin_stores: tuple[Path, Path, np.ndarray]) -> None:
    """v2 keys left the runs out: a file under such a name (another store's, or junk) is never taken as valid."""
    _, sy, v = twin_stores
    sha = open_store(sy).manifest["files"]["values.bin"]["sha256"]
    old = hashlib.sha256(f"{sha}|{[0, 1]}|expanding|v2".encode()).hexdigest()[:16]
    planted = normalize.user_derived_dir(sha) / f"expanding-{old}.f32"
    planted.parent.mkdir(parents=True)
    np.full((200, 2), 7.0, np.float32).tofile(planted)
    got = _derived(sy, "expanding")
    assert np.allclose(got, _expanding_reference(v, [(0, 100), (100, 200)]), atol=1e-5)


def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], src: Path) -> str:
    out = tmp_path / "st"
    assert main(["data", "ingest", str(src), "--out", str(out)]) == 2
    assert not out.exists()
    return capsys.readouterr().err


def test_futures_contracts_by_file_name_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The audit's roll: CL.F24.csv 14:31-14:59, CL.G24.csv 15:00-15:29 became one symbol `CL` across the roll."""
    _csv(tmp_path / "fut" / "CL.F24.csv", _values(29))
    _csv(tmp_path / "fut" / "CL.G24.csv", _values(30, seed=1) * [1.07, 1], start=29)
    err = _refused(tmp_path, capsys, tmp_path / "fut")
    assert err.count("\n") == 1 and err.startswith("stride data ingest: 2 files would all be symbol 'CL'")
    for word in ("CL.F24.csv", "CL.G24.csv", "'F24', 'G24'", "'symbol' column", "--symbol-col", "symbol=NAME",
                 "rename", "CL_F24.csv"):
        assert word in err, (word, err)


def test_share_classes_are_refused_before_any_timestamp_check(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """BRK.A.csv + BRK.B.csv at the same times failed with "timestamp out of order ... symbol BRK"."""
    _csv(tmp_path / "brk" / "BRK.A.csv", _values(20))
    _csv(tmp_path / "brk" / "BRK.B.csv", _values(20, seed=1))
    err = _refused(tmp_path, capsys, tmp_path / "brk")
    assert "would all be symbol 'BRK'" in err and "BRK.A.csv" in err and "BRK.B.csv" in err
    assert "timestamp" not in err
    with pytest.raises(IngestError, match="would all be symbol 'BRK'"):  # the API says the same
        ingest(tmp_path / "brk", tmp_path / "st2")
    # more files than the message lists: the first few, and how many more
    for k in "CDEF":
        _csv(tmp_path / "brk" / f"BRK.{k}.csv", _values(20, seed=2))
    err = _refused(tmp_path, capsys, tmp_path / "brk")
    assert "6 files would all be symbol 'BRK'" in err and "and 3 more" in err and "BRK.D.csv" not in err


def test_part_and_date_suffixes_stay_one_symbol(tmp_path: Path) -> None:
    v = _values(60)
    _csv(tmp_path / "parts" / "AAA.1.csv", v[:30])
    _csv(tmp_path / "parts" / "AAA.2.csv", v[30:], start=30)
    assert _symbols(ingest(tmp_path / "parts", tmp_path / "s1")) == {"AAA": 60}
    for k, name in enumerate(("AAA.2024-01-02.csv", "AAA.2024-02.csv", "AAA.20240301.csv", "AAA.part-4.csv.gz")):
        path = tmp_path / "dates" / name
        _csv(path.with_suffix(".csv") if name.endswith(".gz") else path, v[15 * k : 15 * (k + 1)], start=15 * k)
        if name.endswith(".gz"):
            import gzip

            path.write_bytes(gzip.compress(path.with_suffix(".csv").read_bytes()))
            path.with_suffix(".csv").unlink()
    assert _symbols(ingest(tmp_path / "dates", tmp_path / "s2")) == {"AAA": 60}


def test_a_symbol_column_takes_no_symbol_from_the_name(tmp_path: Path) -> None:
    _csv(tmp_path / "fut" / "CL.F24.csv", _values(29), symbol="CLF24")
    _csv(tmp_path / "fut" / "CL.G24.csv", _values(30, seed=1), start=29, symbol="CLG24")
    assert _symbols(ingest(tmp_path / "fut", tmp_path / "st")) == {"CLF24": 29, "CLG24": 30}
    # one of them without the column: the other is alone under its stem, nothing to refuse
    _csv(tmp_path / "fut" / "CL.G24.csv", _values(30, seed=1), start=29)
    assert _symbols(ingest(tmp_path / "fut", tmp_path / "st", overwrite=True)) == {"CLF24": 29, "CL": 30}


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_a_bfloat16_target_column_is_said_once(tmp_path: Path, dtype: str, caplog: pytest.LogCaptureFixture) -> None:
    _csv(tmp_path / "src" / "AAA.csv", _values(400))
    assert main(["data", "ingest", str(tmp_path / "src"), "--out", str(tmp_path / "st"), "--dtype", dtype]) == 0
    cfg = load_config(overrides=['data.source="store"', f'data.store="{tmp_path / "st"}"', "data.seq_len=8",
                                 "data.horizons=[1, 3]", "data.val_fraction=0.3", 'data.target_column="close"',
                                 "data.prefetch=0", "data.gather_threads=1"]).data
    with caplog.at_level(logging.WARNING, logger="stride.data"):
        build_store_sources(cfg)
    lines = [r.getMessage() for r in caplog.records if "bfloat16" in r.getMessage()]
    if dtype == "float32":
        assert lines == []
        return
    assert len(lines) == 1, lines
    assert "'close'" in lines[0] and str(tmp_path / "st") in lines[0] and "float32" in lines[0]


@pytest.mark.parametrize("names", [
    # the review's layouts that ingested before and must still: one suffix throughout is one series
    ("date=2024-01-02/AAPL.US.csv", "date=2024-01-03/AAPL.US.csv"),
    ("date=2024-01-02/data.v2.csv", "date=2024-01-03/data.v2.csv"),
    ("AAPL.US.1.csv", "AAPL.US.2.csv"),
    ("AAA.2024_01_02.csv", "AAA.2024_01_03.csv"),
    ("AAA.2024Q1.csv", "AAA.2024Q2.csv"),
    ("AAA.part1of2.csv", "AAA.part2of2.csv"),
])
def test_one_suffix_throughout_is_one_series(tmp_path: Path, names: tuple[str, str]) -> None:
    v = _values(60)
    _csv(tmp_path / "src" / names[0], v[:30])
    _csv(tmp_path / "src" / names[1], v[30:], start=30)
    assert list(_symbols(ingest(tmp_path / "src", tmp_path / "st")).values()) == [60]
