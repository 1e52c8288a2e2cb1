"""`stride data synth --freq 0min` said "(0 s) does not divide the 23400 s session", and `--freq=-1min` "expected a
number and a unit": a bar length that is not positive is said to be that (audit of 2026-12-07)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.cli.main import main
from stride.data.simulator import parse_freq


@pytest.mark.parametrize(("freq", "sec"), [("0min", 0), ("0s", 0), ("-1min", -60), ("-30s", -30), (" -1h", -3600)])
def test_a_frequency_that_is_not_positive_is_said_to_be(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         freq: str, sec: int) -> None:
    rc = main(["data", "synth", "--out", str(tmp_path / "sy"), f"--freq={freq}", "--assets", "1", "--days", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"stride data synth: frequency {freq!r} ({sec} s): a bar length must be positive" in err, err
    assert "does not divide" not in err and "expected a number" not in err
    assert list(tmp_path.iterdir()) == []


def test_positive_frequencies_are_unchanged() -> None:
    assert parse_freq("1min") == 60 and parse_freq("+5min") == 300 and parse_freq("30s") == 30
    with pytest.raises(ValueError, match=r"'7min' \(420 s\) does not divide the 23400 s session"):
        parse_freq("7min")
    with pytest.raises(ValueError, match="expected a number and a unit"):
        parse_freq("fast")
