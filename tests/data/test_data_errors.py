"""Every bad input stops with an error that names what is wrong and where; fill policies fill exactly."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from data_fixtures import bars, write_parquet_dataset  # noqa: E402

from stride.config import load_config  # noqa: E402
from stride.config.errors import ConfigError  # noqa: E402
from stride.data.build import build_data  # noqa: E402
from stride.data.ingest import IngestError, ingest  # noqa: E402
from stride.data.store import open_store  # noqa: E402


def _write(path: Path, table: pa.Table) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def _with(col: str, row: int, value: object, t: pa.Table | None = None) -> pa.Table:
    d = (t or bars("AAA")).to_pydict()
    d[col][row] = value
    return pa.table(d)


@pytest.mark.parametrize("value,word", [(float("nan"), "NaN"), (float("inf"), "inf")])
def test_non_finite_value_names_file_column_row(tmp_path: Path, value: float, word: str) -> None:
    f = _write(tmp_path / "src" / "a.parquet", _with("f2", 37, value))
    with pytest.raises(IngestError, match=rf"a\.parquet: column 'f2' has {word} at row 37 "):
        ingest(tmp_path / "src", tmp_path / "st")
    assert f.exists() and not (tmp_path / "st").exists()


def test_null_counts_as_missing(tmp_path: Path) -> None:
    _write(tmp_path / "src" / "a.parquet", _with("f1", 5, None))
    with pytest.raises(IngestError, match="column 'f1' has NaN at row 5"):
        ingest(tmp_path / "src", tmp_path / "st")


def test_fill_policies(tmp_path: Path) -> None:
    t = _with("f1", 6, float("nan"), _with("f1", 5, float("nan")))
    _write(tmp_path / "src" / "a.parquet", t)
    ref = t["f1"].to_numpy()
    ff = open_store(ingest(tmp_path / "src", tmp_path / "ff", fill_policy="ffill")).values[:, 1].numpy()
    assert ff[5] == ff[6] == np.float32(ref[4]) and ff[7] == np.float32(ref[7])
    z = open_store(ingest(tmp_path / "src", tmp_path / "z", fill_policy="zero")).values[:, 1].numpy()
    assert z[5] == z[6] == 0.0 and z[4] == np.float32(ref[4])
    _write(tmp_path / "lead" / "a.parquet", _with("f1", 0, float("nan")))
    with pytest.raises(IngestError, match="row 0 .*no earlier value"):
        ingest(tmp_path / "lead", tmp_path / "x", fill_policy="ffill")


def test_ffill_carries_across_files(tmp_path: Path) -> None:
    t = bars("AAA")
    _write(tmp_path / "src" / "1.parquet", t.slice(0, 50))
    _write(tmp_path / "src" / "2.parquet", _with("f1", 0, float("nan"), t.slice(50)))
    v = open_store(ingest(tmp_path / "src", tmp_path / "st", fill_policy="ffill")).values[:, 1].numpy()
    assert v[50] == v[49] == np.float32(t["f1"].to_numpy()[49])


@pytest.mark.parametrize("kind", ["duplicated", "out of order"])
def test_bad_timestamps(tmp_path: Path, kind: str) -> None:
    t = bars("AAA")
    ts = t["timestamp"].to_numpy().copy()
    if kind == "duplicated":
        ts[20] = ts[19]
    else:
        ts[20], ts[21] = ts[21], ts[20]
    d = t.to_pydict()
    d["timestamp"] = pa.array(ts, pa.timestamp("ns"))
    _write(tmp_path / "src" / "a.parquet", pa.table(d))
    with pytest.raises(IngestError, match=rf"a\.parquet: timestamp {kind} at row {20 if kind == 'duplicated' else 21} "
                                          r"\(symbol AAA"):
        ingest(tmp_path / "src", tmp_path / "st")


def test_timestamps_out_of_order_across_files(tmp_path: Path) -> None:
    t = bars("AAA")
    _write(tmp_path / "src" / "1.parquet", t.slice(50))
    _write(tmp_path / "src" / "2.parquet", t.slice(0, 50))
    with pytest.raises(IngestError, match=r"2\.parquet: timestamp out of order at row 0 "):
        ingest(tmp_path / "src", tmp_path / "st")


def test_schema_differs_between_files(tmp_path: Path) -> None:
    _write(tmp_path / "src" / "1.parquet", bars("AAA"))
    _write(tmp_path / "src" / "2.parquet", bars("BBB").append_column("extra", pa.array(np.zeros(100))))
    with pytest.raises(IngestError, match=r"2\.parquet: schema differs from .*1\.parquet: extra columns \['extra'\]"):
        ingest(tmp_path / "src", tmp_path / "st")


def test_non_numeric_column(tmp_path: Path) -> None:
    _write(tmp_path / "src" / "1.parquet", bars("AAA").append_column("note", pa.array(["x"] * 100)))
    with pytest.raises(IngestError, match="column 'note' has type string"):
        ingest(tmp_path / "src", tmp_path / "st")


def _store_cfg(store: Path, *extra: str):  # noqa: ANN202
    return load_config(overrides=['data.source="store"', f'data.store="{store}"', *extra]).data


def test_window_longer_than_series_and_empty_split(tmp_path: Path) -> None:
    write_parquet_dataset(tmp_path / "src")  # 2 symbols x 2 days x 50 minutes
    st = ingest(tmp_path / "src", tmp_path / "st")
    with pytest.raises(ConfigError, match="longer than the longest series run .*50 rows.*cross_days"):
        build_data(_store_cfg(st, "data.seq_len=48", "data.horizons=[5]"), 8)
    build_data(_store_cfg(st, "data.seq_len=48", "data.horizons=[5]", "data.cross_days=true",
                          "data.val_fraction=0.2"), 8)
    with pytest.raises(ConfigError, match="the val split of .* is empty"):
        build_data(_store_cfg(st, "data.seq_len=8", "data.horizons=[5]", "data.val_fraction=0.01"), 8)
    with pytest.raises(ConfigError, match='needs `data.store`'):
        load_config(overrides=['data.source="store"'])


def test_rolling_window_is_validated_and_its_warmup_can_empty_a_split(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"`data.normalize_window` = 0 must be >= 2 rows"):
        load_config(overrides=['data.normalize="rolling"'])
    with pytest.raises(ConfigError, match=r"`data.normalize_window` = 1 must be >= 2"):
        load_config(overrides=['data.normalize="rolling"', "data.normalize_window=1"])
    with pytest.raises(ConfigError, match=r"`data.normalize_window` = 30 is only used with .*rolling.*'train'"):
        load_config(overrides=["data.normalize_window=30"])
    with pytest.raises(ConfigError, match=r"`data.resident_mb` = -1.0 must be >= 0"):
        load_config(overrides=["data.resident_mb=-1"])
    write_parquet_dataset(tmp_path / "src")  # 2 symbols x 100 rows (cross_days: one run each)
    st = ingest(tmp_path / "src", tmp_path / "st")
    base = ("data.seq_len=8", "data.horizons=[1]", "data.cross_days=true", 'data.normalize="rolling"')
    build_data(_store_cfg(st, *base, "data.normalize_window=60"), 8)
    with pytest.raises(ConfigError, match=r"the train split .* is empty .*normalize_window=95: the first 94 rows"):
        build_data(_store_cfg(st, *base, "data.normalize_window=95"), 8)


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    _write(tmp_path / "src" / "1.parquet", bars("AAA"))
    (tmp_path / "src" / "2.parquet").write_bytes(b"not a parquet file at all")
    with pytest.raises(IngestError, match=r"2\.parquet: cannot be read"):
        ingest(tmp_path / "src", tmp_path / "st")
    assert not (tmp_path / "st").exists()
