"""A trace whose times were changed is refused, naming the file and what is wrong (outside audit: a trace with every
`ts` negated was analysed as steps 7, 6, 5 and "host-bound, 72 % idle", exit 0): negative times (torch.profiler never
writes one: Kineto clamps a time before its base to 0), ProfilerStep windows that run backwards, or overlap."""

from __future__ import annotations

import copy
import gzip
import json
import sys
from pathlib import Path

import pytest
from shared_data import TRACES, need_shared

sys.path.insert(0, str(Path(__file__).parent))
from synth import cpu_trace, host, write  # noqa: E402

from stride.cli.main import main  # noqa: E402
from stride.profile.analyze import analyze_traces  # noqa: E402
from stride.profile.errors import TraceError  # noqa: E402
from stride.profile.trace_model import load_trace  # noqa: E402


def three_steps() -> dict:
    """cpu_trace's step three times over: ProfilerStep#5 [0,100), #6 [100,200), #7 [200,300)."""
    one = cpu_trace()
    ev = []
    for k in range(3):
        for e in copy.deepcopy(one["traceEvents"]):
            e["ts"] += 100 * k
            if e["name"].startswith("ProfilerStep"):
                e["name"] = f"ProfilerStep#{5 + k}"
            ev.append(e)
    return one | {"traceEvents": ev}


def negated(trace: dict) -> dict:
    """Every ts negated, as the audit's trace was."""
    out = copy.deepcopy(trace)
    for e in out["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = -e["ts"]
    return out


def mirrored(trace: dict, about: float) -> dict:
    """Mirrored in time about `about` / 2 (each event's end becomes its start): all times still positive."""
    out = copy.deepcopy(trace)
    for e in out["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = about - e["ts"] - e.get("dur", 0)
    return out


def test_the_synthetic_trace_itself_loads(tmp_path: Path) -> None:
    rep = analyze_traces([write(tmp_path / "t.json", three_steps())])
    assert rep["ranks"]["0"]["steps"] == [5, 6, 7]


def test_negated_times_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path / "neg.json", negated(three_steps()))
    assert main(["analyze", str(p)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"stride analyze: {p}: a host event") and "ts=-" in err and "never negative" in err


def test_steps_that_run_backwards_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path / "mirrored.json", mirrored(three_steps(), 1000))
    assert main(["analyze", str(p)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert f"{p}: ProfilerStep#6 (ts=800.0) comes after ProfilerStep#7 (ts=700.0)" in err
    assert "run backwards in time" in err


def test_overlapping_steps_are_refused(tmp_path: Path) -> None:
    t = cpu_trace()
    t["traceEvents"].append(host("ProfilerStep#8", 60, 100, cat="user_annotation"))  # #7 is [0, 100)
    with pytest.raises(TraceError, match=r"o\.json: ProfilerStep#7 \[0\.0, 100\.0\] overlaps ProfilerStep#8 "
                                         r"\[60\.0, 160\.0\] by 40 µs"):
        load_trace(write(tmp_path / "o.json", t))


def test_steps_that_touch_or_overlap_by_a_rounding_load(tmp_path: Path) -> None:
    t = cpu_trace()
    t["traceEvents"].append(host("ProfilerStep#8", 100, 100, cat="user_annotation"))
    t["traceEvents"].append(host("ProfilerStep#9", 199.5, 100, cat="user_annotation"))
    assert [s.number for s in load_trace(write(tmp_path / "t.json", t)).steps] == [7, 8, 9]


def real_trace() -> dict:
    p = need_shared(TRACES / "cpu_gloo_2rank" / "rank0.pt.trace.json.gz")  # torch.profiler's own, steps 2, 3, 4
    with gzip.open(p, "rt") as fh:
        return json.load(fh)


@pytest.mark.parametrize("how", ["negated", "mirrored"])
def test_a_real_trace_mirrored_is_refused(tmp_path: Path, how: str) -> None:
    t = real_trace()
    assert load_trace(write(tmp_path / "as_written.json", t)).steps  # as torch wrote it: loads
    bad = negated(t) if how == "negated" else mirrored(t, 2e13)
    p = write(tmp_path / f"{how}.json", bad)
    words = "never negative" if how == "negated" else r"ProfilerStep#3 .* comes after ProfilerStep#4 .* backwards"
    with pytest.raises(TraceError, match=rf"{how}\.json: .*{words}"):
        analyze_traces([p])
