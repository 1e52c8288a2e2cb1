"""`stride data ingest` names the likely fix for a newcomer's own CSV (first-contact audit of 2026-12-07).

Before, each of these listed the file's columns and left the user to spot the cause: `--time-col date` on a `Date`
header, a `ticker` column (stride's default symbol column is `symbol`) refused as a non-numeric feature with no word
of --symbol-col, a semicolon-separated file reported only as lacking a `time` column, and a misspelt `--columns` name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.cli.main import main

TICKS = "time,ticker,bid,ask\n2024-01-02 14:30:00,AAPL,1.0,1.1\n2024-01-02 14:31:00,AAPL,1.1,1.2\n"


def _ingest(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *args: str) -> str:
    src = tmp_path / "ticks.csv"
    src.write_text(text)
    rc = main(["data", "ingest", str(src), "--out", str(tmp_path / "st"), *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "st").exists()
    return err


def test_a_time_column_in_another_case_is_pointed_at(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _ingest(tmp_path, capsys, TICKS.replace("time,", "Date,", 1), "--time-col", "date")
    assert "no timestamp column 'date' (did you mean 'Date'?)" in err, err
    assert "--time-col" in err


def test_a_text_column_beside_no_symbol_column_names_symbol_col(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    err = _ingest(tmp_path, capsys, TICKS, "--time-col", "time")
    assert "column 'ticker' has type string" in err, err
    assert "pass --symbol-col ticker" in err, err


def test_a_text_column_beside_the_symbol_column_gets_no_symbol_hint(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    text = "time,symbol,note,bid\n2024-01-02 14:30:00,AAPL,x,1.0\n2024-01-02 14:31:00,AAPL,y,1.1\n"
    err = _ingest(tmp_path, capsys, text, "--time-col", "time")
    assert "column 'note' has type string" in err and "--symbol-col" not in err, err


def test_a_semicolon_separated_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _ingest(tmp_path, capsys, TICKS.replace(",", ";"), "--time-col", "time")
    assert "no timestamp column 'time'" in err
    assert "separated by ';'" in err and "comma-separated" in err, err


def test_a_misspelt_feature_column_is_pointed_at(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _ingest(tmp_path, capsys, TICKS, "--time-col", "time", "--symbol-col", "ticker", "--columns", "bid,aks")
    assert "requested columns ['aks'] are not in the file (did you mean 'ask'?)" in err, err


def test_a_missing_relative_store_says_where_it_was_looked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A config's `data.store = "st1"` run from another folder said only `st1: no such directory`: a relative path
    is read from the current directory (not the config's folder), and the message now says which path it tried."""
    monkeypatch.chdir(tmp_path)
    rc = main(["data", "inspect", "st1"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"looked for {tmp_path.resolve() / 'st1'}" in err and "current directory" in err, err


def test_a_separate_time_of_day_column_says_to_join_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`date,time,bid` with --time-col date: the time of day was refused as a non-numeric feature (type time32[s])."""
    text = "date,time,bid\n2024-01-02,14:30:00,1.0\n2024-01-02,14:31:00,1.1\n"
    err = _ingest(tmp_path, capsys, text, "--time-col", "date")
    assert "column 'time' has type time32" in err and "join the date and the time of day into one column" in err, err


def test_a_non_iso_time_column_gets_a_format_that_reads_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`01/13/2024 14:30` was answered "pass --time-format, e.g. '%m/%d/%Y'", which fails on the same column."""
    text = "time,ticker,bid\n01/12/2024 14:30,A,1.0\n01/13/2024 14:31,A,1.1\n"
    err = _ingest(tmp_path, capsys, text, "--time-col", "time", "--symbol-col", "ticker")
    assert "e.g. '%m/%d/%Y %H:%M', which reads the first 2 values" in err, err
    ambiguous = "time,ticker,bid\n01/02/2024,A,1.0\n01/03/2024,A,1.1\n"
    err = _ingest(tmp_path, capsys, ambiguous, "--time-col", "time", "--symbol-col", "ticker")
    assert "one of '%m/%d/%Y', '%d/%m/%Y'" in err and "check which" in err, err


def test_a_store_given_as_the_source_says_it_is_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ingesting a store folder (what ingest wrote) said only `no .parquet, .arrow, .csv, .npy or .npz files`."""
    src = tmp_path / "ticks.csv"
    src.write_text(TICKS)
    assert main(["data", "ingest", str(src), "--out", str(tmp_path / "st"), "--time-col", "time",
                 "--symbol-col", "ticker"]) == 0
    capsys.readouterr()
    rc = main(["data", "ingest", str(tmp_path / "st"), "--out", str(tmp_path / "st2")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "is a stride store" in err and f"data.store={tmp_path / 'st'}" in err, err
    assert not (tmp_path / "st2").exists()


def test_a_pandas_unnamed_index_is_named_as_the_time_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`df.to_parquet()` of a frame on an unnamed DatetimeIndex stores the times as `__index_level_0__`; the refusal
    listed that name without saying it holds the times."""
    pd = pytest.importorskip("pandas")
    idx = pd.date_range("2024-01-02 14:30", periods=5, freq="min", tz="UTC")
    src = tmp_path / "px.parquet"
    pd.DataFrame({"close": [1.0, 1.1, 1.2, 1.3, 1.4]}, index=idx).to_parquet(src)
    rc = main(["data", "ingest", str(src), "--out", str(tmp_path / "st")])
    err = capsys.readouterr().err
    assert rc == 2 and "pass --time-col __index_level_0__" in err, err
    assert main(["data", "ingest", str(src), "--out", str(tmp_path / "st"), "--time-col", "__index_level_0__"]) == 0
