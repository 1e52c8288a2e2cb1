"""`stride data ingest` input defect of the audit of 2026-12-07: each refusal is one line naming the input file and
what is wrong in it, exit 2, and nothing at --out (docs/data.md: a failed ingest writes nothing).

1. A CSV header with an unnamed column (`timestamp,symbol,px,`) was committed into a store whose manifest the reader
   then refused ("stride data: st/manifest.json: columns must be a non-empty list of distinct names"), left at --out.
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
