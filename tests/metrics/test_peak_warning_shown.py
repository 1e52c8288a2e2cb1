"""`peak_warning_shown_as_line`: a command shows PeakBelowAchievedWarning as its message alone, while the warning
itself stays a warning (library callers, filters and `pytest.warns` see it as before) and others show as before."""

from __future__ import annotations

import warnings

import pytest

from stride.metrics.peak import Peak, PeakBelowAchievedWarning, mfu_fields, peak_warning_shown_as_line


def test_the_message_alone_goes_to_the_command_and_other_warnings_as_before(capsys) -> None:
    lines: list[str] = []
    shown: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, category, *rest: shown.append(f"{category.__name__}: {message}")
        with peak_warning_shown_as_line(lines.append):
            fields = mfu_fields(20.0, Peak(10.0, "x"))
            warnings.warn("something else", UserWarning, stacklevel=1)
        mfu_fields(20.0, Peak(10.0, "x"))  # outside: Python's display again
    assert lines == [fields["mfu_error"]] and lines[0].startswith("MFU would be 200 %")
    assert shown[0] == "UserWarning: something else"
    assert shown[1].startswith("PeakBelowAchievedWarning: MFU would be 200 %") and len(shown) == 2
    assert capsys.readouterr().err == ""


def test_the_warning_is_still_raised_within() -> None:
    with peak_warning_shown_as_line(lambda line: None), pytest.warns(PeakBelowAchievedWarning, match="MFU would be"):
        mfu_fields(20.0, Peak(10.0, "x"))
    with peak_warning_shown_as_line(lambda line: None), warnings.catch_warnings():
        warnings.simplefilter("error", PeakBelowAchievedWarning)
        with pytest.raises(PeakBelowAchievedWarning):
            mfu_fields(20.0, Peak(10.0, "x"))
