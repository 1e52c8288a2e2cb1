"""`stride data ingest` input defects of the audit of 2026-12-07: each refusal is one line naming the input file and
what is wrong in it, exit 2, and nothing at --out (docs/data.md: a failed ingest writes nothing).

1. A CSV header with an unnamed column (`timestamp,symbol,px,`) was committed into a store whose manifest the reader
   then refused ("stride data: st/manifest.json: columns must be a non-empty list of distinct names"), left at --out.
2. A number too large for float64 (`1e400`) was read as inf and, under a fill policy, replaced by 0 or the value
   before, where a finite value beyond the store's range is always an error.
3. Timestamps with and without a zone offset in one file (or integer epochs beside text) blamed a valid value and
   suggested --time-format.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stride.cli.main import main
from stride.data.store import StoreError, StoreWriter, open_store


def _ingest(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    rc = main(["data", "ingest", *map(str, args)])
    return rc, capsys.readouterr().err


def _one_line(rc: int, err: str) -> str:
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("stride data ingest: "), lines[0]
    return lines[0]


def _nothing_written(tmp_path: Path, *keep: str) -> None:
    """Only the inputs are left: no store, no temporary folder."""
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)


# -- 1: columns without a name ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("header", "what"), [("timestamp,symbol,px,", "has no name:"),
                                              ("timestamp,symbol,px,  ", "has no name (only whitespace: '  ')")])
@pytest.mark.parametrize("name", ["a.csv", "a.csv.gz"])
def test_an_unnamed_column_is_refused_naming_the_file_and_its_position(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], header: str, what: str, name: str) -> None:
    src = tmp_path / "d"
    src.mkdir()
    text = f"{header}\n2024-01-02T10:00:00Z,AAA,1.0,10\n2024-01-02T10:01:00Z,AAA,1.1,11\n".encode()
    (src / name).write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    line = _one_line(*_ingest(capsys, src, "--out", tmp_path / "st"))
    assert f"{src / name}: column 4 of the header {what}" in line, line
    assert "manifest.json" not in line and "--columns" in line
    _nothing_written(tmp_path, "d")
    # and the store is not left behind to be refused by the next ingest ("already exists")
    assert _ingest(capsys, src, "--out", tmp_path / "st", "--columns", "px")[0] == 0
    assert open_store(tmp_path / "st").columns == ["px"]


def test_an_unnamed_parquet_column_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "d"
    src.mkdir()
    ts = pa.array(np.array(["2024-01-02T10:00", "2024-01-02T10:01"], "datetime64[ns]"))
    pq.write_table(pa.table([ts, pa.array([1.0, 2.0]), pa.array([3.0, 4.0])], names=["timestamp", "px", ""]),
                   src / "AAA.parquet")
    line = _one_line(*_ingest(capsys, src, "--out", tmp_path / "st"))
    assert f"{src / 'AAA.parquet'}: column 3 has no name" in line, line
    _nothing_written(tmp_path, "d")


def test_the_writer_refuses_columns_its_reader_would_refuse_before_writing(tmp_path: Path) -> None:
    for cols in (["px", ""], ["px", "px"], []):
        with pytest.raises(StoreError, match="columns must be a non-empty list of distinct names"):
            StoreWriter(tmp_path / "st", cols)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", [{"columns": ["a", "a"]}, {"n_rows": -1}, {"symbols": "AAA"},
                                 {"dtype": "float16"}])
def test_commit_runs_the_readers_checks_on_the_staged_store(tmp_path: Path, bad: dict) -> None:
    """Whatever the manifest holds, a store open_store would refuse is never moved into place."""
    w = StoreWriter(tmp_path / "st", ["a"])
    w.append("AAA", np.arange(4, dtype=np.int64) * 60_000_000_000, np.ones((4, 1), np.float32))
    with pytest.raises(StoreError, match=rf"^{tmp_path / 'st'}: not written: the store would be refused when "
                                         r"opened \(manifest.json: "):
        w.commit(bad)
    assert list(tmp_path.iterdir()) == []


# -- 2: numbers beyond float64 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["error", "zero", "ffill"])
@pytest.mark.parametrize("text", ["1e400", "-1e400", "1" + "0" * 400], ids=["1e400", "-1e400", "401-digits"])
@pytest.mark.parametrize("name", ["a.csv", "a.csv.gz"])
def test_a_number_beyond_float64_is_out_of_range_under_every_fill_policy(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str, text: str, name: str) -> None:
    src = tmp_path / "o"
    src.mkdir()
    body = (f"timestamp,symbol,px,vol\n2024-01-02T10:00:00Z,AAA,1.0,10\n2024-01-02T10:01:00Z,AAA,{text},11\n"
            "2024-01-02T10:02:00Z,AAA,1.2,12\n").encode()
    (src / name).write_bytes(gzip.compress(body) if name.endswith(".gz") else body)
    line = _one_line(*_ingest(capsys, src, "--out", tmp_path / "s2", "--fill-policy", policy))
    shown = text if len(text) <= 40 else "(401 characters)"
    assert f"{src / name}: column 'px' has " in line and shown in line, line
    assert "at row 1 (0-based data row; symbol AAA), beyond float32's range" in line, line
    assert "inf" not in line.split("has ")[1].split(" at row")[0]
    _nothing_written(tmp_path, "o")


@pytest.mark.parametrize("policy", ["zero", "ffill"])
def test_the_texts_inf_and_nan_keep_their_fill_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      policy: str) -> None:
    """Only a number that overflows is out of range: the texts inf, -Infinity, +INF and nan are filled as before,
    also in a CSV that holds one such number in a later chunk than its infs (the text is read again where needed)."""
    src = tmp_path / "o"
    src.mkdir()
    rows = ["timestamp,symbol,px,vol", "2024-01-02T10:00:00Z,AAA,1.0,10"]
    rows += [f"2024-01-02T10:{i:02d}:00Z,AAA,{v},11" for i, v in enumerate(["inf", "-Infinity", "+INF", "nan"], 1)]
    (src / "a.csv").write_text("\n".join(rows) + "\n")
    rc, err = _ingest(capsys, src, "--out", tmp_path / "st", "--fill-policy", policy)
    assert rc == 0, err
    want = [1.0, 0.0, 0.0, 0.0, 0.0] if policy == "zero" else [1.0] * 5
    assert open_store(tmp_path / "st").values[:, 0].tolist() == want


def test_an_overflowing_number_after_many_infs_in_a_big_csv_is_found(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Several read chunks (pyarrow reads 1 MiB blocks), infs in each, the overflow far down."""
    src = tmp_path / "o"
    src.mkdir()
    n = 120_000
    cells = np.where(np.arange(n) % 7 == 3, "inf", "1.5").astype(object)
    cells[100_003] = "-2e308"
    t0 = np.datetime64("2024-01-02T00:00:00", "s")
    lines = [f"{t0 + i}Z,AAA,{c}" for i, c in enumerate(cells)]
    (src / "a.csv").write_text("timestamp,symbol,px\n" + "\n".join(lines) + "\n")
    line = _one_line(*_ingest(capsys, src, "--out", tmp_path / "st", "--fill-policy", "zero"))
    assert "a.csv: column 'px' has -2e308 at row 100003 (0-based data row; symbol AAA)" in line, line
    _nothing_written(tmp_path, "o")


# -- 3: timestamps of two kinds in one file ------------------------------------------------------------------------

@pytest.mark.parametrize(("first", "second", "has"), [
    ("2024-01-02T10:00:00", "2024-01-02T10:01:00Z", ("has no zone offset", "has one")),
    ("2024-01-02T10:00:00+01:00", "2024-01-02T10:01:00", ("has a zone offset", "has none")),
])
def test_timestamps_with_and_without_a_zone_offset_are_said_to_be_mixed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], first: str, second: str, has: tuple[str, str]) -> None:
    src = tmp_path / "n"
    src.mkdir()
    (src / "a.csv").write_text(f"timestamp,symbol,px\n{first},AAA,1.0\n{second},AAA,1.1\n")
    line = _one_line(*_ingest(capsys, src, "--out", tmp_path / "st"))
    assert f"{src / 'a.csv'}: timestamp column 'timestamp' mixes timestamps with and without a zone offset" in line
    assert f"row 0 '{first}' {has[0]}" in line and f"row 1 '{second}' {has[1]}" in line, line
    assert "--time-format" not in line and "Failed to parse" not in line, line
    _nothing_written(tmp_path, "n")


@pytest.mark.parametrize(("first", "second", "kinds"), [
    ("1704189600", "2024-01-02T10:01:00Z", ("is an integer (epoch)", "is text")),
    ("2024-01-02T10:00:00Z", "1704189660", ("is text", "is an integer (epoch)")),
])
def test_epochs_beside_text_timestamps_are_said_to_be_mixed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            first: str, second: str, kinds: tuple[str, str]) -> None:
    src = tmp_path / "e"
    src.mkdir()
    (src / "a.csv").write_text(f"timestamp,symbol,px\n{first},AAA,1.0\n{second},AAA,1.1\n")
    line = _one_line(*_ingest(capsys, src, "--out", tmp_path / "st"))
    assert f"{src / 'a.csv'}: timestamp column 'timestamp' mixes integer (epoch) timestamps and text" in line, line
    assert f"row 0 '{first}' {kinds[0]}" in line and f"row 1 '{second}' {kinds[1]}" in line, line
    assert "--time-format" not in line, line
    _nothing_written(tmp_path, "e")


T0, T1 = np.datetime64("2024-01-02T10:00:00", "s"), np.datetime64("2024-01-03T10:00:00", "s")


@pytest.mark.parametrize(("early", "late", "has"), [
    (lambda i: f"{T0 + i}", lambda i: f"{T1 + i}Z", "without a zone offset"),
    (lambda i: f"{T0 + i}Z", lambda i: f"{T1 + i}", "without a zone offset"),
    (lambda i: str(1704189600 + i), lambda i: f"{T1 + i}Z", "integer (epoch)"),
    (lambda i: f"{T0 + i}", lambda i: str(1704276000 + i), "integer (epoch)"),
], ids=["naive-then-zoned", "zoned-then-naive", "epochs-then-text", "text-then-epochs"])
def test_a_mix_past_the_first_block_of_a_csv_names_both_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             early, late, has: str) -> None:
    """pyarrow types a CSV column from its first block; a later block of the other kind failed in the reader
    ("CSV conversion error to timestamp[s]: expected no zone offset in ..."), without a row."""
    src = tmp_path / "n"
    src.mkdir()
    n = 3000
    lines = [f"{early(i)},AAA,1.0" for i in range(40_000)] + [f"{late(i)},AAA,1.0" for i in range(n)]
    (src / "a.csv").write_text("timestamp,symbol,px\n" + "\n".join(lines) + "\n")
    line = _one_line(*_ingest(capsys, src, "--out", tmp_path / "st"))
    assert f"{src / 'a.csv'}: timestamp column 'timestamp' mixes" in line and has in line, line
    assert f"row 0 '{early(0)}'" in line and f"row 40000 '{late(0)}'" in line, line
    _nothing_written(tmp_path, "n")


def test_zoned_text_timestamps_outside_a_csv_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Parquet column of ISO text with offsets was refused with "expected no zone offset" (pyarrow types a CSV's
    such column as a UTC timestamp itself); it is read as UTC, as the CSV's is."""
    src = tmp_path / "z"
    src.mkdir()
    pq.write_table(pa.table({"timestamp": ["2024-01-02T10:00:00Z", "2024-01-02T11:01:00+01:00"], "px": [1.0, 2.0]}),
                   src / "AAA.parquet")
    rc, err = _ingest(capsys, src, "--out", tmp_path / "st")
    assert rc == 0, err
    ts = open_store(tmp_path / "st").timestamps
    assert [str(np.datetime64(int(t), "ns")) for t in ts] == ["2024-01-02T10:00:00.000000000",
                                                               "2024-01-02T10:01:00.000000000"]
