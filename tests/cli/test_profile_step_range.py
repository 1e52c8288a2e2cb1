"""`stride profile --steps 0` (or a negative --wait / --warmup) says the range it must be in (first-contact audit of
2026-12-07): it said only "--steps = 0 is out of range"."""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.cli.main import main

CFG = Path(__file__).resolve().parents[2] / "configs" / "quickstart.toml"


@pytest.mark.parametrize(("flag", "value", "least"), [("--steps", "0", 1), ("--wait", "-1", 0), ("--warmup", "-2", 0)])
def test_an_out_of_range_count_names_its_bound(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str,
                                               value: str, least: int) -> None:
    rc = main(["profile", str(CFG), flag, value, "--out", str(tmp_path / "p")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{flag} = {value} is out of range: it must be >= {least}" in err, err
    assert not (tmp_path / "p").exists()
