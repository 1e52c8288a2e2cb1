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
from synth import cpu_trace, gpu_trace, host, launch, write  # noqa: E402

from stride.profile.analyze import analyze_traces  # noqa: E402
from stride.profile.errors import TraceError  # noqa: E402
from stride.profile.render import render_report  # noqa: E402
from stride.profile.trace_model import load_trace  # noqa: E402


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


# -- 4: a GPU run recorded without its kernels (CUPTI range profiling) ----------------------------------------------
def test_cupti_range_profiler_trace_is_refused_as_a_gpu_run_without_kernels() -> None:
    p = need_shared(TRACES / "hta/cupti_profiler")
    with pytest.raises(TraceError, match=r"a GPU run without kernel events: 1,862 CUDA runtime calls \(104 kernel "
                                         r"launches or copies\) and 77 cuda_profiler_range events.*no CPU verdict"):
        analyze_traces([p])  # was: device "cpu", "compute-bound ... matmul/conv 60%"


def test_launches_without_kernels_are_refused(tmp_path: Path) -> None:
    ev = [host("ProfilerStep#1", 0, 100, cat="user_annotation"), host("aten::mm", 0, 90),
          launch(10, 1), launch(20, 2)]
    with pytest.raises(TraceError, match=r"a GPU run without kernel events: 2 CUDA runtime calls \(2 kernel launches"):
        analyze_traces([write(tmp_path / "g.json", {"traceEvents": ev})])


# -- 5: exact duplicate events ---------------------------------------------------------------------------------------
def _figures(rep: dict) -> tuple:
    r = rep["ranks"][next(iter(rep["ranks"]))]
    return (r["temporal_breakdown"], r["idle_breakdown"], [(k["name"], k["count"], k["total_us"])
                                                           for k in r["top_kernels"]], r["annotations"])


@pytest.mark.parametrize("make", [gpu_trace, cpu_trace])
def test_duplicated_events_are_dropped_and_counted(tmp_path: Path, make) -> None:
    once = make()
    twice = make()
    twice["traceEvents"] = [dict(e) for e in twice["traceEvents"] for _ in (0, 1)]
    a = analyze_traces([write(tmp_path / "once.json", once)])
    b = analyze_traces([write(tmp_path / "twice.json", twice)])
    n = len(once["traceEvents"])
    assert _figures(b) == _figures(a)  # was: every count and kernel total doubled
    assert b["ranks"][next(iter(b["ranks"]))]["duplicate_events"] == {"count": n, "of": 2 * n}
    assert a["ranks"][next(iter(a["ranks"]))]["duplicate_events"] == {"count": 0, "of": n}
    out = io.StringIO()
    render_report(b, Console(file=out, width=300))
    assert f"{n} of the trace's {2 * n} events are exact duplicates of another" in out.getvalue()


def test_events_alike_but_for_their_args_are_kept() -> None:
    """HTA's trace_diff control trace holds 643 complete events alike in name, ts, dur, pid and tid (zero-length
    runtime calls) that differ in their args (correlation ids): not duplicates."""
    t = load_trace(need_shared(TRACES / "hta/trace_diff/control/control.json.gz"))
    assert t.duplicates == 0


# -- 6 and 10: kernels without `cat`, events without `name` or `tid` --------------------------------------------------
def _padded_gpu(n_pad: int) -> dict:
    t = gpu_trace()
    t["traceEvents"] += [host("aten::view", 1 + 0.001 * i, 0.0005) for i in range(n_pad)]
    return t


def test_kernels_without_cat_are_malformed(tmp_path: Path) -> None:
    t = gpu_trace()
    for e in t["traceEvents"]:
        if e["cat"] == "kernel":
            del e["cat"]
    with pytest.raises(TraceError, match=r"2 of its 8 events \(25\.0%\) are malformed \(cat is missing: 2; first: "
                                         r"traceEvents\[5\] \(name 'volta_sgemm_128x64_nn'\): cat is missing"):
        analyze_traces([write(tmp_path / "t.json", t)])  # was: the kernels vanished, "host-bound, idle 99.9%"
    t = _padded_gpu(200)
    del t["traceEvents"][5]["cat"]
    m = analyze_traces([write(tmp_path / "one.json", t)])["ranks"]["3"]["malformed_events"]
    assert m["count"] == 1 and m["reasons"] == {"cat is missing": 1}


@pytest.mark.parametrize(("key", "index"), [("name", 5), ("tid", 2)])
def test_events_without_name_or_tid_are_malformed(tmp_path: Path, key: str, index: int) -> None:
    t = _padded_gpu(200)
    del t["traceEvents"][index][key]  # a kernel without a name; a host runtime call without a thread
    m = analyze_traces([write(tmp_path / "t.json", t)])["ranks"]["3"]["malformed_events"]
    assert m["count"] == 1 and m["reasons"] == {f"{key} is missing": 1}  # was: 0, analysed as a kernel named ""


# -- 7: kernels without args: no correlation to their launch --------------------------------------------------------
def test_idle_split_without_launch_correlation_is_not_measured(tmp_path: Path) -> None:
    t = gpu_trace()
    for e in t["traceEvents"]:
        if e["cat"] in ("kernel", "gpu_memcpy"):
            del e["args"]
    ib = analyze_traces([write(tmp_path / "t.json", t)])["ranks"]["3"]["idle_breakdown"]
    # idle 40: 10 data wait; of the other 30, [0,10) and [60,70) end at kernels whose launch is unknown (20 of 30)
    assert ib["host_wait_pct"] is None and ib["kernel_wait_pct"] is None and ib["other_pct"] is None  # was 0 / 25 / 50
    assert ib["data_wait_pct"] == pytest.approx(25.0) and ib["unknown_launch_pct"] == pytest.approx(50.0)
    assert ib["note"].startswith("host/kernel wait not measured: 66.7% of the idle time outside data loading")
    whole = analyze_traces([write(tmp_path / "w.json", gpu_trace())])["ranks"]["3"]["idle_breakdown"]
    assert (whole["host_wait_pct"], whole["kernel_wait_pct"], whole["unknown_launch_pct"]) == (25.0, 25.0, 0.0)
    assert "note" not in whole


# -- 8: an annotation nested in another of its label ------------------------------------------------------------------
def test_nested_annotation_instances_are_a_union(tmp_path: Path) -> None:
    ev = [host("ProfilerStep#1", 0, 100, cat="user_annotation"), host("aten::mm", 0, 90),
          host("## forward ##", 10, 80, cat="user_annotation"), host("## forward ##", 20, 60, cat="user_annotation"),
          host("## forward ##", 95, 10, cat="user_annotation")]
    (row,) = analyze_traces([write(tmp_path / "a.json", {"traceEvents": ev})])["ranks"]["0"]["annotations"]
    # [10,90) holds [20,80); [95,100) clipped at the step's end: 85 us, not 80 + 60 + 5 = 145 (145%)
    assert (row["name"], row["count"], row["total_us"], row["pct_of_step"]) == ("forward", 3, 85.0, 85.0)


# -- 9: `stride profile`'s summary.json step time ---------------------------------------------------------------------
def test_profile_summary_labels_the_profiled_and_unprofiled_step_times_beside_the_timed_mean() -> None:
    from types import SimpleNamespace

    from stride.cli.profile import step_time_labels

    # the audit's run: 8 timed steps, 5 traced at 72.45 ms mean, the unprofiled median 57.84 ms; the trainer's mean
    # over all 8 (67.99 ms) is summary.json's step_time_s, the figure samples_per_s and mfu come from, and stays it
    cb = SimpleNamespace(unprofiled_step_s=0.05784, active_step_times=[{"total": x} for x in
                                                                      (0.0700, 0.0720, 0.0730, 0.0740, 0.07325)])
    summary = {"step_time_s": 0.06799, "timed_steps": 8}
    step_time_labels(cb).on_fit_end(None, summary)
    assert summary["step_time_s"] == 0.06799
    assert summary["step_time_profiled_s"] == pytest.approx(0.07245)
    assert summary["step_time_unprofiled_s"] == 0.05784
    assert summary["step_time_note"] == (
        "step_time_s (67.99 ms) is the mean over all 8 timed steps, profiled ones included, as samples_per_s and mfu "
        "are; the profiled steps took 72.45 ms (the profiler's own cost included), the unprofiled --wait steps "
        "before the profiler started 57.84 ms (median; the run's earliest steps, which may still be warming up)")
    bare = {"step_time_s": 0.06799, "timed_steps": 8}
    step_time_labels(SimpleNamespace(unprofiled_step_s=None, active_step_times=[])).on_fit_end(None, bare)
    assert bare["step_time_s"] == 0.06799 and bare["step_time_unprofiled_s"] is None
    assert bare["step_time_note"].endswith("were not timed (--wait 2 or more times them)")
