"""`stride data ingest` input errors are one line on stderr naming the file, exit 2 (docs/data.md).

Audit 2: a CSV whose header is Latin-1 (`cl\\xe9se`) gave a UnicodeDecodeError traceback (exit 1) from
`chunk.schema.names`; `--time-col symbol` (the symbol column) said "column 'timestamp' has type timestamp[s];
feature columns must be numeric", about a column the user did not choose.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from stride.cli.main import main

LATIN1 = b"timestamp,symbol,cl\xe9se\n2024-01-02T10:00:00,AAA,1.0\n2024-01-02T10:01:00,AAA,2.0\n"
TEXT = b"timestamp,symbol,note,close\n2024-01-02T10:00:00,AAA,x,1.0\n2024-01-02T10:01:00,AAA,y,2.0\n"


def _ingest(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = main(["data", "ingest", *args])
    err = capsys.readouterr().err
    return rc, err


@pytest.mark.parametrize("name", ["a.csv", "a.csv.gz"])
def test_a_header_that_is_not_utf8_is_one_line_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               name: str) -> None:
    src = tmp_path / "latin1"
    src.mkdir()
    (src / name).write_bytes(gzip.compress(LATIN1) if name.endswith(".gz") else LATIN1)
    rc, err = _ingest(capsys, str(src), "--out", str(tmp_path / "st"))
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"stride data ingest: {src / name}: cannot be read: column names are not UTF-8" in err
    assert "0xe9" in err and "column 3" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latin1"]  # no store, no temporary directory


def test_time_col_that_is_the_symbol_column_is_said_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.csv").write_bytes(TEXT)
    rc, err = _ingest(capsys, str(tmp_path / "a.csv"), "--out", str(tmp_path / "st"), "--time-col", "symbol",
                      "--columns", "close")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "--time-col" in err and "--symbol-col" in err and "both 'symbol'" in err
    assert "'timestamp' has type" not in err


def test_time_col_naming_a_text_column_is_said_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.csv").write_bytes(TEXT)
    rc, err = _ingest(capsys, str(tmp_path / "a.csv"), "--out", str(tmp_path / "st"), "--time-col", "note")
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "a.csv: timestamp column 'note' does not parse" in err
    assert "'timestamp' has type" not in err
    assert not (tmp_path / "st").exists()


def test_a_stray_cell_in_a_number_column_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One cell pyarrow cannot read as a number types the whole column as text: the refusal names its row and value
    (it said only "column 'price' has type string": first-contact audit of 2026-12-06)."""
    (tmp_path / "a.csv").write_text("timestamp,symbol,price,volume\n2024-01-02T14:30:00Z,A,1.0,10\n"
                                    "2024-01-02T14:31:00Z,A,1.5,11\n2024-01-02T14:32:00Z,A,1.2x,12\n")
    rc, err = _ingest(capsys, str(tmp_path / "a.csv"), "--out", str(tmp_path / "st"))
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "column 'price' has type string (row 2, 0-based data row: '1.2x' is not a number)" in err
