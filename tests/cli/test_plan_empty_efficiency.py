"""`stride plan`'s input files (first-contact audit of 2026-12-07). An empty `--efficiency FILE`: `stride plan
calibrate runs/a runs/b ... > eff.json` that refuses (a busy host, a fit that misses its own runs) leaves the shell's
redirected file empty, and the next plan said only `eff.json: not valid JSON: Expecting value: line 1 column 1
(char 0)`. A relative `--from-csv` path that is not there said only `file not found`."""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.cli.main import main


def test_an_empty_efficiency_file_names_the_calibrate_redirect(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    eff = tmp_path / "eff.json"
    eff.write_text("")
    rc = main(["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--efficiency", str(eff)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{eff}: the efficiency file is empty" in err and "stride plan calibrate" in err, err
    assert "Expecting value" not in err


def test_a_non_empty_bad_file_still_says_not_valid_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    eff = tmp_path / "eff.json"
    eff.write_text("{")
    rc = main(["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--devices", "8", "--efficiency", str(eff)])
    err = capsys.readouterr().err
    assert rc == 2 and "not valid JSON" in err and "is empty" not in err, err


def test_a_missing_relative_csv_names_where_it_was_looked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """README's `stride plan --from-csv data/perfmodel/published_dev.csv` run outside the clone said only `file not
    found: data/perfmodel/published_dev.csv` (first-contact audit of 2026-12-07)."""
    monkeypatch.chdir(tmp_path)
    rc = main(["plan", "--from-csv", "data/perfmodel/published_dev.csv"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"looked for {tmp_path.resolve() / 'data' / 'perfmodel' / 'published_dev.csv'}" in err, err
