"""Malformed trace events are counted and said, never dropped without a word (outside audit 14, M5).

Before: an event whose `ph` was a list (`{"name": 5, "ph": ["X"], "ts": "a", "dur": {}}`) was skipped silently, so
one event in 7 replaced gave other operator shares at exit 0; a host event whose `name` was a number, or whose `cat`
was a list, ended the analysis with "an event field has an unexpected type" for the whole trace. Now each is left out
and counted by reason (`malformed_events`), the tables say how many, and a trace with more than MALFORMED_MAX of
them is refused naming the file, the counts and the first one.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).parent))
from synth import cpu_trace, host, write  # noqa: E402

from stride.cli.main import main  # noqa: E402
from stride.profile.analyze import analyze_traces  # noqa: E402
from stride.profile.errors import TraceError  # noqa: E402
from stride.profile.render import render_report  # noqa: E402
from stride.profile.trace_model import MALFORMED_MAX  # noqa: E402

BAD = {"name": 5, "ph": ["X"], "ts": "a", "dur": {}}  # the audit's event


def _trace(n_ops: int, bad: list[dict]) -> dict:
    """The synthetic CPU step, padded with `n_ops` tiny operators (inside the step), plus the `bad` events."""
    t = cpu_trace()
    pad = [host("aten::view", 60 + 0.001 * i, 0.0005) for i in range(n_ops)]
    for e in pad:
        e["pid"] = 1000
    t["traceEvents"] += pad + bad
    return t


def test_a_few_malformed_events_are_counted_and_said(tmp_path: Path) -> None:
    bad = [BAD, {**host("aten::add", 1, 1), "name": 7}, {**host("aten::mm", 1, 1), "args": [1]},
           {**host("aten::mm", 1, 1), "tid": [1]}, {**host("aten::mm", 1, 1), "cat": ["cpu_op"]}, {"ts": 1}]
    path = write(tmp_path / "trace_rank0.json", _trace(700, bad))
    rank = analyze_traces([path])["ranks"]["0"]
    m = rank["malformed_events"]
    assert m["count"] == 6 and m["of"] == 6 + 700 + 6
    assert m["reasons"] == {"ph is a list": 1, "name is a number": 1, "args is a list": 1, "tid is a list": 1,
                            "cat is a list": 1, "ph is missing": 1}
    assert m["first"] == "traceEvents[706]: ph is a list, not a string"
    # the figures are the well-formed events' (the good step's operators are all there)
    assert rank["operator_time"]["math_pct"] == pytest.approx(30.0)
    buf = io.StringIO()
    render_report(analyze_traces([path]), Console(file=buf, width=300))
    out = buf.getvalue()
    assert "rank 0: 6 of the trace's 712 events left out as malformed (ph is a list: 1" in out
    assert "first: traceEvents[706]: ph is a list, not a string): the figures above are without them" in out


def test_a_clean_trace_says_none(tmp_path: Path) -> None:
    path = write(tmp_path / "trace_rank0.json", cpu_trace())
    m = analyze_traces([path])["ranks"]["0"]["malformed_events"]
    assert m == {"count": 0, "of": 6, "reasons": {}, "first": None}


def test_more_than_the_threshold_is_refused_naming_the_counts(tmp_path: Path, capsys) -> None:
    assert MALFORMED_MAX == 0.01
    # 1 in 7, as the audit replaced: far above 1 %
    t = cpu_trace()
    t["traceEvents"].append(BAD)
    path = write(tmp_path / "trace_rank0.json", t)
    with pytest.raises(TraceError, match=r"1 of its 7 events \(14\.3%\) are malformed \(ph is a list: 1; first: "
                                         r"traceEvents\[6\]: ph is a list, not a string\).*refused above 1% of the "
                                         r"events"):
        analyze_traces([path])
    assert main(["analyze", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stride analyze: {path}: 1 of its 7 events") and err.count("\n") == 1
    # exactly at the threshold it is analysed (1 of 100 events), one more is refused
    path = write(tmp_path / "trace_rank0.json", _trace(93, [BAD]))
    assert analyze_traces([path])["ranks"]["0"]["malformed_events"]["count"] == 1
    path = write(tmp_path / "trace_rank0.json", _trace(92, [BAD, BAD]))
    with pytest.raises(TraceError, match="2 of its 100 events"):
        analyze_traces([path])


def test_all_events_malformed_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "trace_rank0.json"
    path.write_text(json.dumps({"traceEvents": [BAD] * 3}))
    with pytest.raises(TraceError, match="3 of its 3 events .100.0%. are malformed"):
        analyze_traces([path])


def test_operator_names_are_shown_as_written(tmp_path: Path, capsys) -> None:
    """M1/M2 in `stride analyze`: `[/bold]` in an operator's name was a MarkupError traceback, Lightning's
    `[pl][profile]` prefix disappeared, and an ESC sequence reached the terminal."""
    t = cpu_trace()
    t["traceEvents"][2]["name"] = "aten::mm[/bold]\x1b]0;PWNED\x07"
    t["traceEvents"].append({**host("[pl][profile][Strategy]SingleDeviceStrategy.optimizer_step", 80, 5,
                                    cat="user_annotation"), "pid": 1000})
    path = write(tmp_path / "trace_rank0.json", t)
    assert main(["analyze", str(path)]) == 0
    out = capsys.readouterr().out
    assert "aten::mm[/bold]\\x1b]0;PWNED\\x07" in out
    assert "[pl][profile][Strategy]SingleDeviceStrategy.optim" in out
    assert "\x1b" not in out and "\x07" not in out
