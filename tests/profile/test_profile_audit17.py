"""Outside audit 17: verdicts on workloads with a known bottleneck.

- H1: on 2-rank gloo DDP (61-73 % of the step the sync, by the processes' own clock) exposed comm read 20-35 %:
  (a) gloo's thread "overlapped" the main thread's operators on a host with no core free for it, (b) DDP's reducer
  operators were bandwidth-bound memory, (c) memory under communication counted as neither.
- H2: with no threshold firing the verdict was compute-bound, also at compute 19 % of the step.
- M1: the profiler's per-operator cost showed as idle and decided host-bound; M2: "enable torch.compile" for a step
  already compiled; M3: a 26 % data stall got no word; M4: the fp16 compression hook offered on gloo, where it was
  slower. L2: no "borderline"; L3: the table lacked the exposed shares; L4: one non-trace .json stopped a directory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).parent))
from synth import host, kernel, launch, write  # noqa: E402

from stride.cli.main import main  # noqa: E402
from stride.profile.analyze import analyze_traces  # noqa: E402
from stride.profile.errors import TraceError  # noqa: E402
from stride.profile.render import render_report  # noqa: E402

FREE_CORE = {"cores": 8, "intra_op_threads": 1, "ranks_on_host": 2}  # 2 x (1 + 1) = 4 threads <= 8 cores
NO_FREE_CORE = {"cores": 2, "intra_op_threads": 1, "ranks_on_host": 2}  # 4 threads > 2 cores


def ddp_step(rank: int = 0, stride_host: dict | None = None, host_name: str = "h") -> dict:
    """One CPU step [0,100): the main thread runs aten::mm [0,40) and aten::add [40,60); gloo's thread all-reduces
    [20,60); DDP's reducer copies [60,70) on the main thread; idle [70,100).

    compute [0,40) = 40, of which [20,40) under the all-reduce; memory [40,60) = 20, all under it; comm [20,70) = 50
    (the reducer's 10 included)."""
    ev = [host("ProfilerStep#2", 0, 100, cat="user_annotation"), host("aten::mm", 0, 40), host("aten::add", 40, 20),
          host("gloo:all_reduce", 20, 40, cat="user_annotation", tid=9),
          host("torch.distributed.ddp.reducer::copy_bucket_to_grad", 60, 10)]
    for e in ev:
        e["pid"] = 1000 + rank
    t = {"schemaVersion": 1, "host_name": host_name,
         "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2}, "traceEvents": ev}
    if stride_host is not None:
        t["stride_host"] = stride_host
    return t


def rank0(tmp_path: Path, trace: dict, name: str = "t.json") -> dict:
    return analyze_traces([write(tmp_path / name, trace)])["ranks"]["0"]


# -- H1 (a) ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stride_host", [None, NO_FREE_CORE])
def test_concurrent_comm_is_exposed_without_a_free_core(tmp_path: Path, stride_host: dict | None) -> None:
    """Before: overlap 40 %, exposed comm 30 %, compute 40 % (gloo's thread under the mm and the add)."""
    r = rank0(tmp_path, ddp_step(stride_host=stride_host))
    tb, rule = r["temporal_breakdown"], r["comm_overlap_rule"]
    assert tb["exposed_comm_pct"] == pytest.approx(50.0) and r["comm_comp_overlap_pct"] == 0.0
    assert tb["compute_pct"] == pytest.approx(20.0)  # the mm's [20,40) is the all-reduce's time
    assert rule["overlap_counted"] is False and rule["concurrent_pct"] == pytest.approx(40.0)
    assert ("4 threads > 2 cores" if stride_host else "does not record the host's cores") in rule["reason"]
    assert r["verdict"]["bound"] == "communication-bound"


def test_concurrent_comm_is_overlap_with_a_free_core(tmp_path: Path) -> None:
    r = rank0(tmp_path, ddp_step(stride_host=FREE_CORE))
    tb, rule = r["temporal_breakdown"], r["comm_overlap_rule"]
    assert rule["overlap_counted"] is True and "4 threads <= 8 cores" in rule["reason"]
    assert r["comm_comp_overlap_pct"] == pytest.approx(40.0) and tb["compute_pct"] == pytest.approx(40.0)
    assert tb["exposed_comm_pct"] == pytest.approx(30.0)  # the add's [40,60) and the reducer's [60,70)


def test_ranks_on_the_host_counted_from_host_names(tmp_path: Path) -> None:
    """A trace that records cores and threads but not its ranks on the host: both ranks' traces on one host_name
    say 2 (2 x 2 <= 4: counted); one trace alone says nothing (exposed)."""
    meta = {"cores": 4, "intra_op_threads": 1, "ranks_on_host": None}
    d = tmp_path / "run"
    d.mkdir()
    for r in (0, 1):
        write(d / f"trace_rank{r}.json", ddp_step(r, meta))
    both = analyze_traces([d])["ranks"]["0"]["comm_overlap_rule"]
    assert both["overlap_counted"] and (both["ranks_on_host"], both["ranks_on_host_source"]) == (2, "host_name")
    alone = analyze_traces([d / "trace_rank0.json"])["ranks"]["0"]["comm_overlap_rule"]
    assert not alone["overlap_counted"] and alone["ranks_on_host"] is None


# -- H1 (b), (c), L3 -------------------------------------------------------------------------------------------------

def test_reducer_operators_are_communication_and_shares_add_up(tmp_path: Path) -> None:
    """Before: the reducer's copy was a memory operator (exposed memory 10 %), and the add under the all-reduce
    counted towards neither exposed share (non-compute 40 = 20 comm + 10 memory + 10 unlabelled)."""
    r = rank0(tmp_path, ddp_step(stride_host=FREE_CORE))
    tb = r["temporal_breakdown"]
    top = {k["name"]: k["kind"] for k in r["top_kernels"]}
    assert top["torch.distributed.ddp.reducer::copy_bucket_to_grad"] == "communication"
    assert tb["exposed_memory_pct"] == pytest.approx(0.0) and r["operator_time"]["bandwidth_pct"] == pytest.approx(20)
    shares = ("compute_pct", "exposed_comm_pct", "exposed_memory_pct", "other_busy_pct", "idle_pct")
    assert sum(tb[k] for k in shares) == pytest.approx(100.0)
    con = Console(width=250, record=True)
    render_report(analyze_traces([write(tmp_path / "t.json", ddp_step(stride_host=FREE_CORE))]), con)
    text = con.export_text()
    assert "exposed comm" in text and "exposed memory" in text  # the columns the verdicts rest on
    assert "counted as overlapped (40.0% of it ran under compute)" in text
    d = tmp_path / "run"  # the straggler check compares collectives, not the reducer's operators
    d.mkdir()
    for rank in (0, 1):
        t = ddp_step(rank, FREE_CORE)
        if rank == 1:  # rank 1's reducer copy starts 5 ms late, its all-reduce on time
            t["traceEvents"][-1]["ts"] += 5000
            t["traceEvents"][0]["dur"] += 5000
        write(d / f"trace_rank{rank}.json", t)
    assert analyze_traces([d])["stragglers"] == []


# -- H2, L2 ----------------------------------------------------------------------------------------------------------

def cpu_shares(compute: float, comm: float, mem: float) -> dict:
    """A 100 µs CPU step with those shares (no overlap), the rest idle."""
    return {"schemaVersion": 1, "stride_host": FREE_CORE, "traceEvents": [
        host("ProfilerStep#1", 0, 100, cat="user_annotation"), host("aten::mm", 0, compute),
        host("gloo:all_reduce", compute, comm, cat="user_annotation", tid=9),
        host("aten::add", compute + comm, mem)]}


def test_with_no_threshold_fired_the_largest_share_decides(tmp_path: Path) -> None:
    """The audit's 2d rank 1 in miniature: compute the smallest share read compute-bound."""
    v = rank0(tmp_path, cpu_shares(22.0, 24.0, 24.9))["verdict"]
    assert v["bound"] == "memory-bound" and v["borderline"]
    assert v["reasons"][0].startswith("bandwidth-bound operators 24.9% of the step, the largest share")
    assert "exposed communication 24.0%" in v["reasons"][0] and "compute 22.0%" in v["reasons"][0]
    assert "(borderline: 24.9% vs 24.0%)" in v["reasons"][0]
    assert rank0(tmp_path, cpu_shares(24.0, 24.9, 22.0))["verdict"]["bound"] == "communication-bound"


def test_gpu_with_no_threshold_fired_the_largest_share_decides(tmp_path: Path) -> None:
    """Compute 22 %, exposed comm 24.5 %, copies 24 %: compute-bound before."""
    ev = [host("ProfilerStep#1", 0, 100, cat="user_annotation"), launch(0, 1), launch(1, 2), launch(2, 3),
          kernel("volta_sgemm_128x64_nn", 0, 22, 7, 1),
          kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 22, 24.5, 8, 2),
          kernel("Memcpy DtoH (Device -> Pinned)", 46.5, 24, 7, 3, cat="gpu_memcpy")]
    v = rank0(tmp_path, {"schemaVersion": 1, "traceEvents": ev})["verdict"]
    assert v["bound"] == "communication-bound" and "the largest share" in v["reasons"][0]


def test_a_verdict_near_its_threshold_says_borderline(tmp_path: Path) -> None:
    v = rank0(tmp_path, cpu_shares(60.0, 26.0, 0.0))["verdict"]
    assert v["bound"] == "communication-bound" and "(borderline: 26.0% vs 25.0%)" in v["reasons"][0]
    v = rank0(tmp_path, cpu_shares(60.0, 29.0, 0.0))["verdict"]
    assert not v["borderline"] and "borderline" not in v["reasons"][0]


# -- M4 --------------------------------------------------------------------------------------------------------------

def test_cpu_communication_advice_leads_with_accumulation(tmp_path: Path) -> None:
    recs = rank0(tmp_path, cpu_shares(30.0, 40.0, 0.0))["verdict"]["recommendations"]
    assert "no_sync" in recs[0] and "grad_accum" in recs[0]
    text = " ".join(recs)
    assert "compress" not in text and "fp16" not in text and "measure" in text


# -- M1 --------------------------------------------------------------------------------------------------------------

def op_dense(unprofiled_us: float | None) -> dict:
    """Two 1000 µs steps of 50 tiny-ish operators (10 µs each, 10 µs apart): idle 50 %."""
    ev = [host("ProfilerStep#1", 0, 1000, cat="user_annotation"), host("ProfilerStep#2", 1000, 1000,
                                                                        cat="user_annotation")]
    ev += [host("aten::addmm", 20.0 * k, 10) for k in range(100)]
    t = {"schemaVersion": 1, "traceEvents": ev}
    if unprofiled_us is not None:
        t["stride_unprofiled_step"] = {"median_us": unprofiled_us, "steps_us": [unprofiled_us] * 3}
    return t


def test_the_profilers_own_cost_is_left_out_of_the_idle_rule(tmp_path: Path) -> None:
    """Unprofiled 650 µs: 350 µs of each 1000 µs step's 500 µs idle is the profiler's; 150 of 650 (23 %) is left,
    under the idle rule. Before: host-bound at idle 50 %, nothing said about the profiler."""
    r = rank0(tmp_path, op_dense(650.0))
    st, v = r["step_time"], r["verdict"]
    assert (st["profiled_ms"], st["unprofiled_ms"]) == pytest.approx((1.0, 0.65))
    assert st["ratio"] == pytest.approx(1000 / 650) and st["profiler_idle_pct"] == pytest.approx(35.0)
    assert st["idle_pct_excluding_profiler"] == pytest.approx(100 * 150 / 650)
    assert r["temporal_breakdown"]["idle_pct"] == pytest.approx(50.0)  # the figures stay the trace's
    assert v["bound"] == "compute-bound" and v["steps_by_bound"] == {"compute-bound": 2}
    assert any("without the time the profiler added (profiled step 1.00 ms, unprofiled 0.65 ms: 1.54x)" in x
               for x in v["reasons"])
    con = Console(width=250, record=True)
    render_report(analyze_traces([tmp_path / "t.json"]), con)
    assert "profiled step 1.00 ms, unprofiled 0.65 ms (1.54x)" in con.export_text()


def test_the_profiler_adjustment_never_takes_out_data_wait(tmp_path: Path) -> None:
    """Wait steps that ran faster for another reason (their batches prefetched at start-up): the 45 % data wait
    was taken out of the idle rule as "the profiler's cost" and the step read compute-bound (review of audit 17)."""
    ev = [host("ProfilerStep#7", 0, 100_000, cat="user_annotation"),
          host("stride.data", 0, 45_000, cat="user_annotation"),  # 45 ms waiting for a batch (idle inside)
          host("aten::mm", 45_000, 55_000)]  # 55 ms of compute
    for unprofiled in (None, 56_000):
        t = {"schemaVersion": 1, "traceEvents": ev}
        if unprofiled is not None:
            t["stride_unprofiled_step"] = {"median_us": unprofiled, "steps_us": [unprofiled] * 3}
        r = rank0(tmp_path, t, f"t{unprofiled}.json")
        assert r["verdict"]["bound"] == "data-bound", (unprofiled, r["verdict"])


def test_a_foreign_trace_keeps_its_idle_and_says_where_the_profiler_is(tmp_path: Path) -> None:
    r = rank0(tmp_path, op_dense(None))
    assert r["verdict"]["bound"] == "host-bound"
    assert r["step_time"]["unprofiled_ms"] is None and "profiler's own per-operator cost is in the idle" in \
        r["step_time"]["note"]


# -- M2, M3 ----------------------------------------------------------------------------------------------------------

def test_a_compiled_step_is_not_told_to_compile(tmp_path: Path) -> None:
    """The audit's 5b: host-bound with 38.5 % of the step in compiled graphs, first advice "enable torch.compile"."""
    ev = [host("ProfilerStep#1", 0, 1000, cat="user_annotation"), host("Torch-Compiled Region: 0/0", 0, 400),
          host("CompiledFunction", 5, 390), host("aten::addmm", 10, 300), host("aten::addmm", 600, 50)]
    r = rank0(tmp_path, {"schemaVersion": 1, "traceEvents": ev})
    v = r["verdict"]
    assert r["operator_time"]["compiled_region_pct"] == pytest.approx(40.0)
    assert v["bound"] == "host-bound"
    assert v["recommendations"][0].startswith("40% of the step already runs in compiled code")
    assert not any("enable torch.compile" in x for x in v["recommendations"])


def test_a_compiled_compute_step_keeps_the_not_matmul_line(tmp_path: Path) -> None:
    ev = [host("ProfilerStep#1", 0, 1000, cat="user_annotation"), host("Torch-Compiled Region: 0/0", 0, 900),
          host("CompiledFunction", 2, 896), host("aten::add_", 900, 50)]
    recs = rank0(tmp_path, {"schemaVersion": 1, "traceEvents": ev})["verdict"]["recommendations"]
    assert recs[0].startswith("90% of the step already runs in compiled code")
    assert any(x.startswith("matmul/conv operators take 0% of the operator time") for x in recs)
    assert not any("torch.compile" in x for x in recs[1:])


def test_inductor_kernels_count_as_compiled(tmp_path: Path) -> None:
    """The audit's 4b with kernel profiling: memory-bound on `cpp_fused_*` kernels, advised to fuse with
    torch.compile again."""
    ev = [host("ProfilerStep#1", 0, 1000, cat="user_annotation"),
          host("graph_0_cpp_fused_add_div_expand_gelu_ge_0", 0, 600), host("cpp_fused_add_gelu_mean_mul_0", 600, 300)]
    v = rank0(tmp_path, {"schemaVersion": 1, "traceEvents": ev})["verdict"]
    assert v["bound"] == "memory-bound" and "already runs in compiled code" in v["recommendations"][0]
    assert not any("torch.compile" in x for x in v["recommendations"][1:])


def test_a_data_stall_under_the_idle_threshold_gets_a_line(tmp_path: Path) -> None:
    """The audit's 6c: compute-bound with data wait 25.7 %, and no word about data."""
    ev = [host("ProfilerStep#1", 0, 1000, cat="user_annotation"), host("## data ##", 0, 200, cat="user_annotation"),
          host("aten::mm", 200, 750)]
    v = rank0(tmp_path, {"schemaVersion": 1, "traceEvents": ev})["verdict"]
    assert v["bound"] == "compute-bound"
    assert any(x.startswith("waiting for data takes 20.0% of the step too") and "num_workers" in x
               for x in v["recommendations"])


# -- L4 --------------------------------------------------------------------------------------------------------------

def test_a_json_object_without_trace_events_in_a_directory_is_skipped(tmp_path: Path, capsys) -> None:
    d = tmp_path / "run"
    d.mkdir()
    write(d / "trace_rank0.json", cpu_shares(60.0, 0.0, 0.0))
    (d / "own_clock_rank0.json").write_text(json.dumps({"step_ms": 41.7}))
    rep = analyze_traces([d])
    assert list(rep["ranks"]) == ["0"]
    assert rep["skipped_files"] == [{"file": str(d / "own_clock_rank0.json"),
                                     "why": "a JSON object without 'traceEvents': not a trace"}]
    assert main(["analyze", str(d)]) == 0
    assert f"skipped {d / 'own_clock_rank0.json'}" in capsys.readouterr().out.replace("\n", "")
    with pytest.raises(TraceError, match="no 'traceEvents'"):  # named on its own, it is still an error
        analyze_traces([d / "own_clock_rank0.json"])
    (d / "cut.json").write_text('{"step_ms": 41')  # invalid JSON is an error wherever it is
    with pytest.raises(TraceError, match="cut.json"):
        analyze_traces([d])


def test_the_hta_table_says_whose_figures_the_verdict_reads(tmp_path: Path) -> None:
    """Under --hta-compatible the table holds HTA's figures and the verdict stride's (the analyzer audit of session
    36: HTA's compute 100 % of a 4 us span beside 'host-bound, idle 99.1 %'): the title says which is which."""
    con = Console(width=400, record=True)
    render_report(analyze_traces([write(tmp_path / "t.json", ddp_step(stride_host=FREE_CORE))], hta_compatible=True),
                  con)
    assert "the verdict is from stride's own figures" in con.export_text()
    con = Console(width=400, record=True)
    render_report(analyze_traces([write(tmp_path / "u.json", ddp_step(stride_host=FREE_CORE))]), con)
    assert "the verdict is from stride's own figures" not in con.export_text()
