"""A complete event without `dur` is refused, naming the file and the event (outside audit of `stride analyze`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from synth import host, kernel, launch, write  # noqa: E402

from stride.cli.main import main  # noqa: E402
from stride.profile.analyze import analyze_traces  # noqa: E402
from stride.profile.errors import TraceError  # noqa: E402


def gemm_steps() -> dict:
    """3 steps of 1000 µs, each with 19 GEMMs of 50 µs from 25 to 975 µs: compute 95 % of the step."""
    ev: list[dict] = []
    corr = 0
    for k in range(3):
        s = 10_000.0 + 1000.0 * k
        ev.append(host(f"ProfilerStep#{k + 1}", s, 1000.0, cat="user_annotation"))
        for j in range(19):
            corr += 1
            ev += [launch(s + 1.0, corr), kernel("ampere_sgemm_128x64_tn", s + 25.0 + 50.0 * j, 50.0, 7, corr)]
    return {"schemaVersion": 1, "traceEvents": ev}


def test_kernel_without_dur_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the kernel read as 0 µs long, compute 93.3 % of a step its kernels kept busy 95 %, exit 0."""
    whole = analyze_traces([write(tmp_path / "whole.json", gemm_steps())])["ranks"]["0"]
    assert whole["temporal_breakdown"]["compute_pct"] == pytest.approx(95.0)  # the reference, every dur there
    trace = gemm_steps()
    del next(e for e in trace["traceEvents"] if e["cat"] == "kernel")["dur"]
    p = write(tmp_path / "nodur.json", trace)
    with pytest.raises(TraceError, match=r"nodur\.json: traceEvents\[2\] \(name 'ampere_sgemm_128x64_tn'\): dur is "
                                         "missing"):
        analyze_traces([p])
    assert main(["analyze", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nodur.json" in err[0] and "Traceback" not in err[0]


def test_events_stride_does_not_read_may_lack_dur(tmp_path: Path) -> None:
    """Another category's complete event without dur (not one stride reads) leaves the analysis as it was."""
    trace = gemm_steps()
    trace["traceEvents"].append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
                                 "tid": "PyTorch Profiler", "ts": 10_000.0})
    r = analyze_traces([write(tmp_path / "t.json", trace)])["ranks"]["0"]
    assert r["temporal_breakdown"]["compute_pct"] == pytest.approx(95.0)


def test_epoch_nanoseconds_are_named_as_such(tmp_path: Path) -> None:
    """Times written in ns since the epoch (1.7e18) are refused as before, and the line says what they look like."""
    trace = gemm_steps()
    for e in trace["traceEvents"]:
        e["ts"], e["dur"] = int(e["ts"] * 1000) + 1_700_000_000_000_000_000, e["dur"] * 1000
    with pytest.raises(TraceError, match=r"ns\.json: .*durations >= 0 \(nanoseconds since the epoch\? trace times "
                                         r"are microseconds\)"):
        analyze_traces([write(tmp_path / "ns.json", trace)])
