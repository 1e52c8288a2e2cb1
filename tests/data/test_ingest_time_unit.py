"""Integer timestamps: their unit read from the magnitude (or given), said, recorded; empty .npy inputs named.

Audit finding: `stride data ingest` read Unix seconds (1704189600) as nanoseconds, so every bar landed on
1970-01-01T00:00:01.7 and the ingest succeeded; an empty float32 .npy leaked NumPy's "overflow encountered in
cast" warning and the error named the output store instead of the input file.
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stride.data.ingest import IngestError, ingest, unit_of

SECONDS = 1704189600  # 2024-01-02T10:00:00Z


def _csv(path: Path, stamps: list[int]) -> Path:
    path.write_text("timestamp,symbol,close\n" + "".join(f"{t},A,{1.0 + i}\n" for i, t in enumerate(stamps)))
    return path


def _manifest(store: Path) -> dict:
    return json.loads((store / "manifest.json").read_text())


@pytest.mark.parametrize(("unit", "scale"), [("s", 1), ("ms", 10**3), ("us", 10**6), ("ns", 10**9)])
def test_unit_detected_from_the_magnitude(tmp_path: Path, unit: str, scale: int,
                                          caplog: pytest.LogCaptureFixture) -> None:
    src = _csv(tmp_path / "e.csv", [SECONDS * scale, (SECONDS + 60) * scale])
    with caplog.at_level(logging.WARNING, logger="stride.data"):
        ingest(src, tmp_path / "st")
    m = _manifest(tmp_path / "st")
    assert m["time_range"] == ["2024-01-02T10:00:00.000000000", "2024-01-02T10:01:00.000000000"]
    assert (m["time_unit"], m["time_unit_from"]) == (unit, "magnitude")
    words = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}[unit]
    said = [r.getMessage() for r in caplog.records if r.name == "stride.data"]
    assert any(f"read as {words} since 1970-01-01 UTC" in s and "--time-unit" in s for s in said), said


def test_parquet_integer_seconds(tmp_path: Path) -> None:
    pq.write_table(pa.table({"timestamp": pa.array([SECONDS, SECONDS + 60], pa.int64()), "close": [1.0, 2.0]}),
                   tmp_path / "A.parquet")
    ingest(tmp_path / "A.parquet", tmp_path / "st")
    assert _manifest(tmp_path / "st")["time_range"][0] == "2024-01-02T10:00:00.000000000"


def test_unit_ranges_do_not_overlap() -> None:
    assert [unit_of(v) for v in (SECONDS, SECONDS * 10**3, SECONDS * 10**6, SECONDS * 10**9)] == ["s", "ms", "us", "ns"]
    assert unit_of(631152000) == "s" and unit_of(631152000 - 1) is None  # 1990-01-01 in seconds; a second before
    assert unit_of(4102444800 - 1) == "s" and unit_of(4102444800) is None  # 2100-01-01 in seconds is no date here
    assert unit_of(5) is None and unit_of(-SECONDS) is None


def test_a_magnitude_that_fits_no_unit_is_an_error(tmp_path: Path) -> None:
    src = _csv(tmp_path / "e.csv", [1, 2, 3])
    with pytest.raises(IngestError, match=r"e\.csv: integer timestamp 1 at row 0 .*fits no unit.*--time-unit"):
        ingest(src, tmp_path / "st")
    assert not (tmp_path / "st").exists()


def test_a_row_in_another_unit_is_an_error_naming_it(tmp_path: Path) -> None:
    src = _csv(tmp_path / "e.csv", [SECONDS, SECONDS + 60, (SECONDS + 120) * 1000])
    with pytest.raises(IngestError, match=r"integer timestamp 1704189720000 at row 2 .*in seconds.*reads as "
                                          r"milliseconds"):
        ingest(src, tmp_path / "st")


def test_a_given_unit_is_used_as_given(tmp_path: Path) -> None:
    ingest(_csv(tmp_path / "c.csv", [1, 2, 3]), tmp_path / "counter", time_unit="ns")  # a row counter
    m = _manifest(tmp_path / "counter")
    assert m["time_range"] == ["1970-01-01T00:00:00.000000001", "1970-01-01T00:00:00.000000003"]
    assert (m["time_unit"], m["time_unit_from"]) == ("ns", "given")
    ingest(_csv(tmp_path / "e.csv", [SECONDS, SECONDS + 60]), tmp_path / "ms", time_unit="ms")
    assert _manifest(tmp_path / "ms")["time_range"][0] == "1970-01-20T17:23:09.600000000"


def test_a_given_unit_that_overflows_nanoseconds_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="beyond what 64-bit nanoseconds"):
        ingest(_csv(tmp_path / "e.csv", [SECONDS * 10**9]), tmp_path / "st", time_unit="s")


def test_an_unknown_unit_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="time unit 'h' is not one of auto, s, ms, us, ns"):
        ingest(_csv(tmp_path / "e.csv", [SECONDS]), tmp_path / "st", time_unit="h")


def test_time_typed_columns_record_no_unit(tmp_path: Path) -> None:
    (tmp_path / "e.csv").write_text("timestamp,symbol,close\n2024-01-02T10:00:00,A,1.0\n2024-01-02T10:01:00,A,2.0\n")
    ingest(tmp_path / "e.csv", tmp_path / "st")
    assert "time_unit" not in _manifest(tmp_path / "st")


def test_npy_row_numbers_stay_nanoseconds(tmp_path: Path) -> None:
    """A .npy has no time column: its rows are numbered, and no unit is detected for them (as before)."""
    np.save(tmp_path / "a.npy", np.ones((3, 2), np.float64))
    ingest(tmp_path / "a.npy", tmp_path / "st")
    assert _manifest(tmp_path / "st")["time_range"] == ["1970-01-01T00:00:00.000000000",
                                                       "1970-01-01T00:00:00.000000002"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("store_dtype", ["float32", "bfloat16"])
def test_float_npy_ingests_without_numpy_warnings(tmp_path: Path, dtype: type, store_dtype: str) -> None:
    np.save(tmp_path / "a.npy", np.ones((4, 3), dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ingest(tmp_path / "a.npy", tmp_path / "st", dtype=store_dtype)


def test_float32_beyond_bfloat16_is_still_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.array([[1.0], [3.399e38]], np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(IngestError, match="beyond bfloat16's range"):
            ingest(tmp_path / "a.npy", tmp_path / "st", dtype="bfloat16")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_empty_npy_is_an_error_naming_the_input(tmp_path: Path, dtype: type) -> None:
    np.save(tmp_path / "empty.npy", np.zeros((0, 3), dtype))
    out = tmp_path / "store_out"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(IngestError) as info:
            ingest(tmp_path / "empty.npy", out)
    assert str(tmp_path / "empty.npy") in str(info.value) and "no rows" in str(info.value)
    assert "store_out" not in str(info.value)
    assert not out.exists() and not list(tmp_path.glob(".tmp-*"))


def test_a_folder_of_empty_files_is_named(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("a.npy", "b.npy"):
        np.save(src / name, np.zeros((0, 2), np.float32))
    with pytest.raises(IngestError, match=r"src: holds no rows in any of its 2 files"):
        ingest(src, tmp_path / "st")
