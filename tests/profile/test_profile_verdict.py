"""Advice that fits the trace: many tiny kernels are launch-bound (fusion, compile, CUDA graphs, not
bf16); data wait is a share of the step; a lower precision is advised only where it measured faster."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from shared_data import TRACES, need_shared
from synth import host, kernel, launch, write  # noqa: E402

from stride.metrics.dtype_speed import DtypeSpeeds, host_speeds, precision_line  # noqa: E402
from stride.profile.analyze import analyze_traces  # noqa: E402
from stride.profile.render import render_report  # noqa: E402

SHARED = TRACES


def gru_like_trace(n_tiny: int = 2290, tiny_us: float = 4.0, n_gemm: int = 230, gemm_us: float = 15.0) -> dict:
    """One step of a GRU on a GPU as reported in issue 16: 2,290 `add_` kernels of 4 µs between 230
    small GEMMs, launched ahead (the device never waits), 1 µs apart. Kernel time 9.2 ms tiny + 3.5 ms
    GEMM; busy ~15 ms of a 16 ms step."""
    ev, t, total = [], 10.0, n_tiny + n_gemm
    for corr in range(1, total + 1):
        gemm = corr * n_gemm // total > (corr - 1) * n_gemm // total  # n_gemm of them, spread evenly
        name, dur = ("ampere_sgemm_32x32_sliced1x4_nn", gemm_us) if gemm else (
            "void at::native::vectorized_elementwise_kernel<add_>", tiny_us)
        ev += [launch(t - 5.0, corr), kernel(name, t, dur, 7, corr)]
        t += dur + 1.0
    ev.insert(0, host("ProfilerStep#1", 0.0, t + 10.0, cat="user_annotation"))
    return {"schemaVersion": 1, "traceEvents": ev}


def test_many_tiny_gpu_kernels_are_launch_bound_not_compute_bound(tmp_path: Path) -> None:
    """Before: 'compute-bound' with 'use bf16 autocast / TF32' (the device is busy, so no idle rule fired)."""
    r = analyze_traces([write(tmp_path / "gru.json", gru_like_trace())])["ranks"]["0"]
    assert r["temporal_breakdown"]["idle_pct"] < 30
    tiny = r["tiny_kernels"]
    assert tiny["count"] == 2290 and tiny["dominant"] and tiny["median_us"] == pytest.approx(4.0)
    v = r["verdict"]
    assert v["bound"] == "launch-bound" and v["steps_by_bound"] == {"launch-bound": 1}
    assert "2,290 of" in v["reasons"][0] and "4.0 µs" in v["reasons"][0]
    recs = " ".join(v["recommendations"])
    assert "torch.compile" in recs and "CUDA graphs" in recs and "fuse" in recs
    assert "bf16" not in recs


def test_few_large_kernels_stay_compute_bound_with_datasheet_precision(tmp_path: Path) -> None:
    r = analyze_traces([write(tmp_path / "big.json", gru_like_trace(n_tiny=20, n_gemm=200, gemm_us=200.0))])
    v = r["ranks"]["0"]["verdict"]
    assert v["bound"] == "compute-bound" and not r["ranks"]["0"]["tiny_kernels"]["flagged"]
    assert v["recommendations"][0].startswith("use bf16 autocast (tensor cores")  # a GPU: the datasheets
    fp16_run = analyze_traces([write(tmp_path / "big.json", gru_like_trace(n_tiny=20, n_gemm=200, gemm_us=200.0))],
                              run_precision="bf16")
    assert "bf16" not in " ".join(fp16_run["ranks"]["0"]["verdict"]["recommendations"])  # already in bf16


def cpu_tiny_ops_trace(n: int = 600) -> dict:
    """A CPU step of n `aten::add_` of 3 µs inside `aten::gru_cell` wrappers of 5 µs (self time 2 µs), back
    to back, and one 100 µs `aten::mm`: dispatch-sized operators take most of the operator time."""
    ev, t = [host("ProfilerStep#1", 0.0, 5.0 * n + 110.0, cat="user_annotation"), host("aten::mm", 5.0, 100.0)], 105.0
    for _ in range(n):
        ev += [host("aten::gru_cell", t, 5.0), host("aten::add_", t + 1.0, 3.0)]
        t += 5.0
    return {"schemaVersion": 1, "traceEvents": ev}


def test_many_tiny_cpu_operators_are_launch_bound(tmp_path: Path) -> None:
    r = analyze_traces([write(tmp_path / "cpu.json", cpu_tiny_ops_trace())])["ranks"]["0"]
    assert r["device"] == "cpu" and r["tiny_kernels"]["dominant"]
    assert r["verdict"]["bound"] == "launch-bound"


def test_data_wait_is_a_share_of_the_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Idle 60 % of a 100 µs step, 40 of it inside data loading: 40 % of the step (66.7 % of the idle)."""
    ev = [host("ProfilerStep#1", 0, 100, cat="user_annotation"), host("## data_load ##", 0, 40, cat="user_annotation"),
          host("aten::mm", 40, 40)]
    rep = analyze_traces([write(tmp_path / "d.json", {"traceEvents": ev})])
    r = rep["ranks"]["0"]
    assert r["temporal_breakdown"]["data_wait_pct"] == pytest.approx(40.0)
    assert r["idle_breakdown"]["data_wait_pct"] == pytest.approx(200 / 3)  # HTA's convention, kept in the JSON
    assert r["verdict"]["bound"] == "data-bound" and "waiting for data 40.0% of the step" in r["verdict"]["reasons"][0]
    render_report(rep)
    row = next(line for line in capsys.readouterr().out.splitlines() if "data-bound" in line and "│" in line)
    assert "40.0%" in row and "66.7%" not in row


SLOW_BF16 = DtypeSpeeds({"fp32": 1.0e11, "bf16": 9e8, "fp16": 3e8}, "matmul")  # the machine: bf16 0.0009 TF/s


def test_precision_advice_never_names_a_dtype_measured_slower() -> None:
    line = precision_line("cpu", "fp32", SLOW_BF16)
    assert line.startswith("keep fp32") and "use" not in line
    fast_matmul = DtypeSpeeds({"fp32": 1e11, "bf16": 2.6e11, "fp16": 3e8}, "matmul")
    assert "measure the step first" in precision_line("cpu", "fp32", fast_matmul)  # a matmul is not a step
    slow_step = DtypeSpeeds({"fp32": 330.0, "bf16": 214.0}, "workload")  # quick start, this AMD EPYC
    assert precision_line("cpu", "fp32", slow_step).startswith("keep fp32: in bf16 this workload's step")
    assert precision_line("cpu", "fp32", DtypeSpeeds({"fp32": 300.0, "bf16": 420.0}, "workload")).startswith(
        "use bf16 autocast: this workload's step measured 1.40x")
    assert precision_line("cpu", "fp32", None) is None  # a CPU nobody measured: no advice either way


def test_this_hosts_slower_dtypes_are_not_recommended() -> None:
    """With this machine's own probe (on the AMD EPYC here fp16's matmul runs ~100x slower than fp32's)."""
    speeds = host_speeds()
    line = precision_line("cpu", "fp32", speeds) or ""
    slower = [d for d in ("bf16", "fp16") if speeds.per_dtype[d] < speeds.per_dtype["fp32"]]
    for d in slower:
        assert f"{d} autocast" not in line, (speeds, line)
    if slower and not line.startswith(("bf16", "fp16")):  # no dtype to try: the slower ones are named
        assert line.startswith("keep fp32") and all(d in line for d in slower), (speeds, line)


def test_cpu_trace_with_slower_bf16_gets_no_bf16_advice(tmp_path: Path) -> None:
    ev = [host("ProfilerStep#1", 0, 100, cat="user_annotation"), host("aten::mm", 0, 95)]
    rep = analyze_traces([write(tmp_path / "c.json", {"traceEvents": ev})], dtype_speeds=lambda t: SLOW_BF16)
    recs = rep["ranks"]["0"]["verdict"]["recommendations"]
    assert rep["ranks"]["0"]["verdict"]["bound"] == "compute-bound"
    assert recs[0].startswith("keep fp32") and not any("use bf16" in r for r in recs)


@pytest.mark.parametrize("rel", ["cpu_gloo_2rank", "hta/trace_filter", "hta/ns_resolution_trace",
                                 "hta/nccl_parser_config", "hta/negative_queue_length_values_check"])
def test_real_traces_verdicts_follow_the_figures(rel: str) -> None:
    """On the shared traces: a rank whose tiny kernels dominate a busy device is never called compute-bound,
    and every compute-bound verdict had its device busy and its tiny kernels below the bound."""
    p = need_shared(SHARED / rel)
    for r in analyze_traces([p])["ranks"].values():
        tiny, v, tb = r["tiny_kernels"], r["verdict"], r["temporal_breakdown"]
        if v["bound"] == "compute-bound":
            assert not tiny["dominant"] and tb["idle_pct"] <= 30
        if tiny["dominant"] and tb["idle_pct"] <= 30 and (tb["exposed_comm_pct"] or 0) <= 25:
            assert v["bound"] == "launch-bound"
        assert tb["data_wait_pct"] is not None and tb["data_wait_pct"] <= tb["idle_pct"] + 1e-9
