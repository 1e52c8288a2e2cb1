"""Outside audit of `stride analyze` (its hand scripts and hostile inputs): stragglers on one clock, the waiting
rank's verdict, missing ranks, GPU runs without kernels, duplicated events, kernels without `cat` or args, nested
annotations, events without `name` or `tid`."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).parent))
from shared_data import TRACES, need_shared  # noqa: E402
from synth import cpu_trace, host, write  # noqa: E402

from stride.profile.analyze import analyze_traces  # noqa: E402
from stride.profile.render import render_report  # noqa: E402


def _rank(rank: int, step_at: float, enter_at: float, coll_dur: float) -> dict:
    """One CPU step of 1000 µs from `step_at`: aten::mm up to the all-reduce, which rank enters at `enter_at`
    (absolute) and sits in for `coll_dur` on gloo's thread."""
    ev = [host("ProfilerStep#3", step_at, 1000, cat="user_annotation"),
          host("aten::mm", step_at, enter_at - step_at),
          host("c10d::allreduce_", enter_at, 2),
          host("gloo:all_reduce", enter_at, coll_dur, cat="user_annotation", tid=9)]
    for e in ev:
        e["pid"] = 1000 + rank
    return {"schemaVersion": 1, "host_name": "h", "distributedInfo": {"backend": "gloo", "rank": rank,
            "world_size": 2}, "traceEvents": ev}


def _late_rank_1(tmp_path: Path) -> Path:
    """As on the audit's 2-rank gloo run: rank 1's step starts 450 µs after rank 0's, and it enters the all-reduce
    300 µs into it (at 750), rank 0 400 µs into its own (at 400), then waits in it until rank 1 arrives (to 800).
    Within their own steps rank 0 enters later (400 > 300): the old check called it a straggler."""
    d = tmp_path / "run"
    d.mkdir()
    write(d / "rank0.json", _rank(0, 0, 400, 400))
    write(d / "rank1.json", _rank(1, 450, 750, 50))
    return d


def test_one_clock_straggler_is_the_rank_entering_last(tmp_path: Path) -> None:
    rep = analyze_traces([_late_rank_1(tmp_path)])
    assert [s["rank"] for s in rep["stragglers"]] == [1]  # was [0, 1]: rank 0 by its offset, rank 1 by step start
    top = rep["stragglers"][0]
    assert top["collective_start_lag_us"] == pytest.approx(350.0)  # 750 - 400, on the one clock
    assert top["step_start_lag_us"] == pytest.approx(450.0)
    assert top["lag_measure"].startswith("absolute entry times")
    (w,) = top["waiting_ranks"]
    assert w["rank"] == 0 and w["wait_us_per_step"] == pytest.approx(350.0)  # from 400 until rank 1 came at 750
    assert w["collective_us_per_step"] == pytest.approx(400.0) and top["collective_us_per_step"] == pytest.approx(50.0)
    assert w["wait_pct_of_step"] == pytest.approx(35.0)


def test_waiting_rank_verdict_says_whom_it_waits_for(tmp_path: Path) -> None:
    rep = analyze_traces([_late_rank_1(tmp_path)])
    v = rep["ranks"]["0"]["verdict"]
    assert v["bound"] == "communication-bound"
    assert v["waiting_on"] == {"rank": 1, "wait_us_per_step": pytest.approx(350.0), "wait_pct_of_step":
                               pytest.approx(35.0)}
    assert v["recommendations"][0].startswith("waiting on rank 1: 0.3 ms per step")
    assert "fix the imbalance" in v["recommendations"][0]
    assert "waiting_on" not in rep["ranks"]["1"]["verdict"]
    out = io.StringIO()
    render_report(rep, Console(file=out, width=300))
    assert "rank 0 waits for rank 1: 0.35 ms per step (35.0% of its step)" in out.getvalue()


def test_missing_rank_is_said_not_no_stragglers(tmp_path: Path) -> None:
    d = tmp_path / "miss"
    d.mkdir()
    write(d / "rank1.json", cpu_trace(1))  # world_size 2, rank 1 only
    rep = analyze_traces([d])
    assert rep["stragglers"] == []
    assert rep["ranks_given"] == {"given": 1, "world_size": 2, "missing": [0], "note": rep["stragglers_note"]}
    assert rep["stragglers_note"].startswith("1 of 2 ranks given (rank 0 missing): stragglers not checked")
    out = io.StringIO()
    render_report(rep, Console(file=out, width=300))
    assert "1 of 2 ranks given (rank 0 missing): stragglers not checked" in out.getvalue()
    assert "no stragglers" not in out.getvalue()


def test_trace_filter_is_two_of_128_ranks() -> None:
    rep = analyze_traces([need_shared(TRACES / "hta/trace_filter")])
    assert rep["stragglers_note"].startswith("2 of 128 ranks given (ranks 2-127 missing): stragglers not checked")
    assert rep["ranks_given"]["missing"] == list(range(2, 128)) and rep["stragglers"] == []


def test_all_ranks_given_has_no_note(tmp_path: Path) -> None:
    rep = analyze_traces([_late_rank_1(tmp_path)])
    assert "stragglers_note" not in rep and "ranks_given" not in rep
