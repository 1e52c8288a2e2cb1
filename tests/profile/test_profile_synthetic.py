"""Breakdowns of synthetic traces against hand-computed values (see synth.py for the arithmetic)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).parent))
from synth import cpu_trace, gpu_trace, host, kernel, launch, write  # noqa: E402

from stride.profile.analyze import analyze_traces  # noqa: E402
from stride.profile.render import render_report  # noqa: E402


def test_gpu_step_breakdown(tmp_path: Path) -> None:
    r = analyze_traces([write(tmp_path / "t.json", gpu_trace())])["ranks"]["3"]
    tb, ib = r["temporal_breakdown"], r["idle_breakdown"]
    assert r["device"] == "gpu" and r["steps"] == [1]
    assert r["span_us"] == pytest.approx(100.0)
    assert tb["idle_pct"] == pytest.approx(40.0)
    assert tb["compute_pct"] == pytest.approx(30.0)
    assert tb["non_compute_pct"] == pytest.approx(30.0)
    assert tb["exposed_comm_pct"] == pytest.approx(20.0)
    assert tb["exposed_memory_pct"] == pytest.approx(10.0)
    assert r["comm_comp_overlap_pct"] == pytest.approx(100.0 / 3)
    assert ib["idle_us"] == pytest.approx(40.0)
    assert ib["host_wait_pct"] == pytest.approx(25.0)
    assert ib["kernel_wait_pct"] == pytest.approx(25.0)
    assert ib["data_wait_pct"] == pytest.approx(25.0)
    assert ib["other_pct"] == pytest.approx(25.0)
    top = {k["name"]: k for k in r["top_kernels"]}
    assert top["volta_sgemm_128x64_nn"]["launch_delay_us"] == pytest.approx(5.0)
    assert top["ncclKernel_AllReduce_RING_LL_Sum_float"]["kind"] == "communication"
    assert top["volta_sgemm_128x64_nn"]["total_us"] == pytest.approx(30.0)
    assert r["verdict"]["bound"] == "host-bound"  # idle 40% > 30%, data wait only 25% of it


def test_gpu_hta_definitions(tmp_path: Path) -> None:
    """HTA: span first-to-last device event [10,80) = 70; idle 10; compute 30; non-compute 30;
    per-stream idle: stream 7 gap 40->70 = 30 us, launch (20) before the gap, not < 30 -> other."""
    r = analyze_traces([write(tmp_path / "t.json", gpu_trace())], hta_compatible=True)["ranks"]["3"]
    tb = r["temporal_breakdown"]
    assert r["span_us"] == pytest.approx(70.0)
    assert tb["idle_us"] == pytest.approx(10.0) and tb["compute_us"] == pytest.approx(30.0)
    assert tb["non_compute_us"] == pytest.approx(30.0)
    assert tb["idle_pct"] == pytest.approx(100 * 10 / 70)
    assert r["comm_comp_overlap_pct"] == pytest.approx(100.0 / 3)
    assert r["idle_breakdown"]["other_us"] == pytest.approx(30.0)
    assert r["idle_breakdown"]["host_wait_us"] == 0.0


def test_hta_drops_last_step_and_rounds(tmp_path: Path) -> None:
    """Two steps; HTA keeps only kernels launched before the last step starts, and rounds
    fractional times inwards: kernel [10.4, 20.6) -> [11, 20)."""
    ev = [
        host("ProfilerStep#1", 0, 50, cat="user_annotation"), host("ProfilerStep#2", 50, 50, cat="user_annotation"),
        launch(1.0, 1), launch(60.0, 2),
        kernel("volta_sgemm", 10.4, 10.2, 7, 1), kernel("volta_sgemm", 61.0, 30.0, 7, 2),
    ]
    p = write(tmp_path / "t.json", {"traceEvents": ev})
    report = analyze_traces([p], hta_compatible=True)
    hta = report["ranks"]["0"]
    assert hta["span_us"] == pytest.approx(9.0)
    assert hta["steps"] == [1]
    assert report["last_step_dropped"] is True  # said, as the step list differs from stride's (audit 12 F10)
    buf = io.StringIO()
    render_report(report, Console(file=buf, width=400))
    text = " ".join(buf.getvalue().split())  # the title wraps at the table's width
    assert "the last profiler step left out, as HTA does: --include-last-step keeps it" in text
    both_report = analyze_traces([p], hta_compatible=True, include_last_step=True)
    assert both_report["last_step_dropped"] is False
    both = both_report["ranks"]["0"]
    assert both["span_us"] == pytest.approx(91.0 - 11.0)
    assert both["temporal_breakdown"]["compute_us"] == pytest.approx(9.0 + 30.0)
    own = analyze_traces([p])["ranks"]["0"]
    assert own["steps"] == [1, 2]
    assert own["span_us"] == pytest.approx(100.0)  # windows [0,50) + [50,100)
    assert own["temporal_breakdown"]["compute_pct"] == pytest.approx(100 * (10.2 + 30.0) / 100)


def test_cpu_only_breakdown(tmp_path: Path) -> None:
    r = analyze_traces([write(tmp_path / "t.json.gz", cpu_trace(), gz=True)])["ranks"]["0"]
    tb, ib = r["temporal_breakdown"], r["idle_breakdown"]
    assert r["device"] == "cpu"
    # the add nested in the mm is bandwidth-bound: memory. The trace records no cores, so the mm's [40,50) under
    # gloo's all-reduce is exposed communication, not compute (it was compute 30, exposed comm 20, overlap 1/3)
    assert tb["compute_pct"] == pytest.approx(20.0)
    assert tb["non_compute_pct"] == pytest.approx(40.0)
    assert tb["exposed_comm_pct"] == pytest.approx(30.0) and tb["exposed_memory_pct"] == pytest.approx(10.0)
    assert r["operator_time"] == pytest.approx({"math_pct": 30.0, "bandwidth_pct": 10.0, "other_pct": 0.0,
                                                "compiled_pct": 0.0, "data_loading_pct": 0.0,
                                                "compiled_region_pct": 0.0})
    assert tb["idle_pct"] == pytest.approx(40.0)
    assert r["comm_comp_overlap_pct"] == 0.0 and r["comm_overlap_rule"]["concurrent_pct"] == pytest.approx(100 / 3)
    assert ib["host_wait_pct"] is None and ib["kernel_wait_pct"] is None
    assert ib["data_wait_pct"] == pytest.approx(25.0) and ib["other_pct"] == pytest.approx(75.0)
    ann = {a["name"]: a for a in r["annotations"]}
    assert ann["data_load"]["total_us"] == pytest.approx(10.0) and ann["data_load"]["pct_of_step"] == pytest.approx(10)
    assert tb["data_wait_pct"] == pytest.approx(10.0)  # of the step (25 % of the idle time)
    tiny = r["tiny_kernels"]  # operators by self time: mm 30 us, add 10 us (collectives are not counted)
    assert tiny["unit"] == "CPU operators (self time)" and tiny["kernels"] == 2 and tiny["count"] == 0
    ops = {k["name"]: k for k in r["top_kernels"]}
    assert ops["aten::mm"]["total_us"] == pytest.approx(40.0) and ops["aten::mm"]["self_us"] == pytest.approx(30.0)
    assert (ops["aten::mm"]["kind"], ops["aten::add"]["kind"]) == ("compute", "memory")
    assert ops["aten::add"]["self_us"] == pytest.approx(10.0)
    assert ops["gloo:all_reduce"]["self_us"] == pytest.approx(30.0)  # its own thread: nothing nested
    assert [k["name"] for k in r["top_kernels"]][:2] == ["aten::mm", "gloo:all_reduce"]


def test_straggler_collective_lag(tmp_path: Path) -> None:
    """Rank 1's collective starts 500 us later than rank 0's within the same step (steps 1000 us long)."""
    a, b = cpu_trace(0), cpu_trace(1, shift=500.0)
    for t in (a, b):
        t["traceEvents"][0]["dur"] = 1000
    d = tmp_path / "run"
    d.mkdir()
    write(d / "r0.json", a)
    write(d / "r1.json", b)
    rep = analyze_traces([d])
    assert sorted(rep["ranks"]) == ["0", "1"]
    assert [s["rank"] for s in rep["stragglers"]] == [1]
    assert rep["stragglers"][0]["collective_start_lag_us"] == pytest.approx(500.0)
    assert rep["stragglers"][0]["step_start_lag_us"] == pytest.approx(0.0)


def test_percentages_of_equal_ranks_have_no_straggler(tmp_path: Path) -> None:
    d = tmp_path / "run"
    d.mkdir()
    write(d / "r0.json", cpu_trace(0))
    write(d / "r1.json", cpu_trace(1))
    assert analyze_traces([d])["stragglers"] == []


def test_duplicate_rank_is_an_error(tmp_path: Path) -> None:
    from stride.profile.errors import TraceError

    write(tmp_path / "a.json", cpu_trace(0))
    write(tmp_path / "b.json", cpu_trace(0))
    with pytest.raises(TraceError, match="rank 0"):
        analyze_traces([tmp_path])


def test_hta_cpu_figures_cover_the_listed_steps(tmp_path: Path) -> None:
    """Three CPU steps of 100 us, aten::mm [10,50) in each, a collective [180,220) across steps 2 and 3. HTA's
    default drops step 3: span, breakdown and operator table all cover steps 1-2 ([10,200): 190 us, the
    collective cut at 200). Before, the CPU figures ignored the drop: span [10,250) = 240 us, while the
    steps said 1,2 and the operator table counted 2 aten::mm."""
    ev = [host(f"ProfilerStep#{k}", 100 * (k - 1), 100, cat="user_annotation") for k in (1, 2, 3)]
    ev += [host("aten::mm", 100 * k + 10, 40) for k in range(3)]
    ev.append(host("gloo:all_reduce", 180, 40, cat="user_annotation", tid=9))
    p = write(tmp_path / "t.json", {"traceEvents": ev})
    r = analyze_traces([p], hta_compatible=True)["ranks"]["0"]
    tb = r["temporal_breakdown"]
    assert r["steps"] == [1, 2]
    assert r["span_us"] == pytest.approx(190.0)
    assert (tb["compute_us"], tb["non_compute_us"], tb["idle_us"]) == pytest.approx((80.0, 20.0, 90.0))
    assert {k["name"]: k["count"] for k in r["top_kernels"]}["aten::mm"] == 2
    both = analyze_traces([p], hta_compatible=True, include_last_step=True)["ranks"]["0"]
    assert both["steps"] == [1, 2, 3] and both["span_us"] == pytest.approx(250.0 - 10.0)
    assert both["temporal_breakdown"]["compute_us"] == pytest.approx(120.0)
    assert {k["name"]: k["count"] for k in both["top_kernels"]}["aten::mm"] == 3
