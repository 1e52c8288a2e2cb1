"""The analyzer on ../shared/traces: HTA's own figures, an independent recomputation, and robustness.

HTA_REFERENCE holds what Holistic Trace Analysis 0.5.0 (PyPI `HolisticTraceAnalysis`) reports for these
files (`TraceAnalysis(trace_dir=...).get_temporal_breakdown()`, `.get_comm_comp_overlap()`,
`.get_idle_time_breakdown(ranks=[r])` summed per category), run once outside this repo; HTA raises
IndexError on the two CPU-only sets, which is why they are absent. The 4876 kernels of the
nanosecond trace is the count HTA's own test suite asserts (tests/test_trace_analysis.py).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from shared_data import TRACES, need_shared

from stride.profile.analyze import analyze_traces
from stride.profile.classify import is_host_comm
from stride.profile.errors import TraceError
from stride.profile.hta_compat import KERNEL_CATS, hta_device_events
from stride.profile.trace_model import load_trace

SHARED = TRACES

# dir -> rank -> (idle us, compute us, non-compute us, span us, overlap %, host wait, kernel wait, other)
HTA_REFERENCE = {
    "hta/trace_filter": {
        0: (321378, 106252, 172428, 600058, 11.81, 958796, 2070, 309639),
        1: (328671, 135548, 136455, 600674, 20.05, 1005000, 1925, 357339),
    },
    "hta/ns_resolution_trace": {0: (10113, 372150, 2371, 384634, None, 1709, 8404, 0)},
    "hta/amd_trace": {0: (8780, 96, 35, 8911, None, 8780, 0, 0)},
    "hta/nccl_parser_config": {0: (338781, 75169, 21636, 435586, 14.31, 738746, 2155, 0)},
}


def need(rel: str) -> Path:
    return need_shared(SHARED / rel)


@pytest.mark.parametrize("rel", sorted(HTA_REFERENCE))
def test_hta_compatible_matches_hta(rel: str) -> None:
    rep = analyze_traces([need(rel)], hta_compatible=True)
    for rank, (idle, comp, noncomp, span, ovl, hw, kw, other) in HTA_REFERENCE[rel].items():
        r = rep["ranks"][str(rank)]
        tb, ib = r["temporal_breakdown"], r["idle_breakdown"]
        assert r["span_us"] == span
        assert (tb["idle_us"], tb["compute_us"], tb["non_compute_us"]) == (idle, comp, noncomp)
        assert tb["idle_pct"] == pytest.approx(100 * idle / span)
        if ovl is None:
            assert r["comm_comp_overlap_pct"] is None  # HTA: NaN (no communication kernels)
        else:
            assert round(r["comm_comp_overlap_pct"], 2) == ovl
        assert (ib["host_wait_us"], ib["kernel_wait_us"], ib["other_us"]) == (hw, kw, other)


def test_hta_kernel_filter_count_matches_hta_test_suite() -> None:
    t = load_trace(need("hta/ns_resolution_trace") / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    ev = hta_device_events(t, include_last_step=False, n_step_names=len(t.steps))
    assert int(sum(c in t.cat_ids(KERNEL_CATS) for c in ev["cat"])) == 4876


def _merge_len(iv: list[tuple[float, float]]) -> float:
    """Plain-Python union length (independent of stride.profile.intervals)."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(iv):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + ((cur_e - cur_s) if cur_e is not None else 0.0)


def _merge(iv: list[tuple[float, float]]) -> list[list[float]]:
    out: list[list[float]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _minus(u: list[list[float]], v: list[list[float]]) -> list[tuple[float, float]]:
    """u less v, both merged (plain Python)."""
    out = []
    for a, b in u:
        cur = a
        for c, d in v:
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append((cur, c))
            cur = max(cur, d)
        if cur < b:
            out.append((cur, b))
    return out


# the data-loading annotations of the gloo sample (not `DistributedDataParallel.forward`, which loads nothing)
GLOO_DATA_ANNOTATIONS = {"## data_load ##", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"}


@pytest.mark.parametrize("rank", [0, 1])
def test_cpu_gloo_breakdown_recomputed_independently(rank: int) -> None:
    """Recompute operator work, idle and data wait of each step from json.load with plain Python and compare.
    Operator work is each thread's operators less that thread's collectives (the main thread's blocking
    c10d::allreduce_ sits inside AccumulateGrad) and less what the data loader runs under its annotations on that
    thread, in plain Python, independently of stride.profile.intervals; it is compute plus bandwidth-bound time,
    which the JSON gives as 100 - idle - exposed comm plus the part of it under communication (the trace records no
    cores, so communication under another thread's operators is exposed). DDP's reducer operators are communication.
    Data wait is the steps' time under a data annotation with no operator work or collective running."""
    path = need("cpu_gloo_2rank") / f"rank{rank}.pt.trace.json.gz"
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name", "").startswith("ProfilerStep#")]
    xs = [e for e in events if e.get("ph") == "X"]
    is_comm = lambda n: is_host_comm(n) or n.startswith(("torch::distributed::reducer::",
                                                          "torch.distributed.ddp.reducer::"))
    comp = [(e["ts"], e["ts"] + e["dur"], e["tid"]) for e in xs
            if e.get("cat") == "cpu_op" and not is_comm(e["name"])]
    comm = [(e["ts"], e["ts"] + e["dur"], e["tid"]) for e in xs
            if e.get("cat") in ("cpu_op", "user_annotation") and is_comm(e["name"])]
    data = [(e["ts"], e["ts"] + e["dur"], e["tid"]) for e in xs
            if e.get("cat") == "user_annotation" and e["name"] in GLOO_DATA_ANNOTATIONS]
    assert any(e["name"] == "DistributedDataParallel.forward" for e in xs) and data
    span = busy = work = under_comm = waiting = 0.0
    for lo, hi in steps:
        clip = lambda ivs: [(max(s, lo), min(e, hi)) for s, e, _ in ivs if e > lo and s < hi]  # noqa: B023
        span += hi - lo
        kept: list[tuple[float, float]] = []  # each thread's operators less its collectives and its data loading
        for tid in {t for _, _, t in comp}:
            mine = lambda ivs: [(s, e, t) for s, e, t in ivs if t == tid]  # noqa: B023
            kept.extend(_minus(_merge(clip(mine(comp))), _merge(clip(mine(comm)) + clip(mine(data)))))
        work += _merge_len(kept)
        under_comm += _merge_len(kept) - _merge_len(_minus(_merge(kept), _merge(clip(comm))))
        active = _merge(kept + clip(comm))
        busy += _merge_len(kept + clip(comm))
        waiting += _merge_len(_minus(_merge(clip(data)), active))
    r = analyze_traces([path])["ranks"][str(rank)]
    tb = r["temporal_breakdown"]
    assert r["device"] == "cpu" and len(steps) == 3
    assert r["span_us"] == pytest.approx(span, rel=1e-9)
    assert 100 - tb["idle_pct"] - tb["exposed_comm_pct"] == pytest.approx(100 * (work - under_comm) / span, rel=1e-6)
    assert r["comm_comp_overlap_pct"] == 0.0 and not r["comm_overlap_rule"]["overlap_counted"]
    assert tb["idle_pct"] == pytest.approx(100 * (span - busy) / span, rel=1e-6)
    assert tb["data_wait_pct"] == pytest.approx(100 * waiting / span, rel=1e-6)


def test_cpu_gloo_straggler_is_rank_1() -> None:
    rep = analyze_traces([need("cpu_gloo_2rank")])
    assert [s["rank"] for s in rep["stragglers"]] == [1]
    assert rep["stragglers"][0]["collective_start_lag_us"] > rep["stragglers"][0]["threshold_us"]
    ann = {a["name"] for a in rep["ranks"]["1"]["annotations"]}
    assert {"data_load", "forward", "backward", "optimizer", "extra_cpu_work"} <= ann


TRACE_FILES = sorted(p for p in SHARED.rglob("*") if p.name.endswith((".json", ".json.gz"))) if SHARED.exists() else []
NOT_TRACES = {"benchmark_simple_add_et.json.gz",  # an execution trace (graph of ops), not a profiler trace
              "benchmark_result_924719_1679055439_trace.json.gz"}  # CUPTI range profiling: a GPU run, no kernels


TRACE_PARAMS = [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.stat().st_size > 500_000 else [])
                for p in TRACE_FILES]


@pytest.mark.parametrize("path", TRACE_PARAMS)
@pytest.mark.parametrize("hta", [False, True])
def test_every_shared_trace(path: Path, hta: bool) -> None:
    if path.name in NOT_TRACES:
        with pytest.raises(TraceError, match=path.name):
            analyze_traces([path], hta_compatible=hta)
        return
    rep = analyze_traces([path], hta_compatible=hta)
    for r in rep["ranks"].values():
        tb = r["temporal_breakdown"]
        if tb["idle_pct"] is not None:
            assert tb["idle_pct"] + tb["compute_pct"] + tb["non_compute_pct"] == pytest.approx(100.0, abs=1e-6)
            assert tb["idle_pct"] >= -1e-9 and tb["non_compute_pct"] >= -1e-6
        json.dumps(rep, allow_nan=False)


def test_rank_from_distributed_info_and_ns_trace() -> None:
    rep = analyze_traces([need("hta/cpu_only")])
    assert list(rep["ranks"]) == ["34"] and rep["ranks"]["34"]["rank_source"] == "distributedInfo"
    ns = analyze_traces([need("hta/ns_resolution_trace")])["ranks"]["0"]
    assert ns["steps"] == [101, 102, 103, 104, 105] and ns["device"] == "gpu"


def test_memory_timeline_is_refused_with_a_clear_error() -> None:
    p = need("hta/memory_analysis/memory_timeline.raw.gz")
    with pytest.raises(TraceError, match="memory_timeline.raw.gz.*not an object"):
        analyze_traces([p])
