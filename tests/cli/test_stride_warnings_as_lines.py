"""stride's own warnings reach a command's user as one line, whichever command trained (first-contact audit of
2026-12-06: `stride bench`, `profile` and `repro` showed Python's file, line and source of the summary code)."""

from __future__ import annotations

import warnings

import pytest

from stride.cli.main import stride_warnings_as_lines
from stride.metrics.peak import PeakBelowAchievedWarning


def test_a_stride_warning_is_one_line_and_others_are_as_before(capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    with warnings.catch_warnings(record=True) as shown_before:  # the display in place before: a recorder here
        warnings.simplefilter("always")
        with stride_warnings_as_lines("bench"):
            warnings.warn("MFU would be 1185 %: the peak is wrong", PeakBelowAchievedWarning, stacklevel=1)
            warnings.warn("something else", UserWarning, stacklevel=1)
    err = capsys.readouterr().err
    assert err == "stride bench: warning: MFU would be 1185 %: the peak is wrong\n"
    assert [(w.category, str(w.message)) for w in shown_before] == [(UserWarning, "something else")]


def test_only_rank_zero_says_it_and_the_warning_is_still_raised(capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    with stride_warnings_as_lines("profile"), pytest.warns(PeakBelowAchievedWarning):
        warnings.warn("MFU would be 1185 %", PeakBelowAchievedWarning, stacklevel=1)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with stride_warnings_as_lines("profile"):
            warnings.warn("MFU would be 1185 %", PeakBelowAchievedWarning, stacklevel=1)
    assert capsys.readouterr().err == ""
