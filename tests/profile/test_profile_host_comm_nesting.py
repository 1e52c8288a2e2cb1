"""CPU traces: time a thread spends inside a collective is communication, even under a compute operator.

DDP's reducer hook calls `c10d::allreduce_` from inside `autograd::engine::evaluate_function: AccumulateGrad`;
the main thread is blocked in the collective, so that time is not compute. Before, the union of CPU operators
counted it as compute: the shared 2-rank gloo trace read compute 70.2% / exposed comm 7.5% / overlap 86.1% on
rank 0 (84.6% / 0.2% / 99.4% on rank 1), both compute-bound.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from shared_data import TRACES, need_shared
from synth import host, write  # noqa: E402

from stride.profile import intervals as iv  # noqa: E402
from stride.profile.analyze import analyze_traces  # noqa: E402

SHARED = TRACES
ACC = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"


def nested_trace(extra: list[dict] | None = None) -> dict:
    """One CPU step [0,100). Main thread (tid 1): AccumulateGrad [10,60) enclosing c10d::allreduce_ [30,50),
    then aten::mm [60,80). gloo's thread (tid 9): gloo:all_reduce [35,90).

    compute = [10,80) less the main thread's collective [30,50) = [10,30) + [50,80) = 50;
    comm = [30,50) + [35,90) = [30,90) = 60; busy [10,90) = 80, idle 20;
    overlap = comm ∩ compute = [50,80) = 30 (50% of comm: gloo's thread working while the main thread computes);
    exposed comm = 60 - 30 = 30 > 25% -> communication-bound.
    (The union of operators alone gave compute 70%, exposed comm 10%, overlap 50/60: compute-bound.)
    """
    ev = [
        host("ProfilerStep#3", 0, 100, cat="user_annotation"),
        host(ACC, 10, 50),
        host("c10d::allreduce_", 30, 20),
        host("aten::mm", 60, 20),
        host("gloo:all_reduce", 35, 55, cat="user_annotation", tid=9),
        *(extra or []),
    ]
    # a core free for gloo's thread (stride_host), so that concurrent communication counts as overlap here
    return {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1},
            "stride_host": {"cores": 4, "intra_op_threads": 1, "ranks_on_host": 1}, "traceEvents": ev}


def test_collective_inside_a_compute_op_is_not_compute(tmp_path: Path) -> None:
    r = analyze_traces([write(tmp_path / "t.json", nested_trace())])["ranks"]["0"]
    tb = r["temporal_breakdown"]
    assert r["device"] == "cpu" and r["span_us"] == 100.0
    assert tb["compute_pct"] == pytest.approx(50.0)
    assert tb["non_compute_pct"] == pytest.approx(30.0)
    assert tb["exposed_comm_pct"] == pytest.approx(30.0)
    assert tb["idle_pct"] == pytest.approx(20.0)
    assert tb["idle_pct"] + tb["compute_pct"] + tb["non_compute_pct"] == pytest.approx(100.0)
    assert r["comm_comp_overlap_pct"] == pytest.approx(50.0)
    assert r["verdict"]["bound"] == "communication-bound"
    assert r["per_step"][0]["verdict"]["bound"] == "communication-bound"
    # the operator table is unchanged: AccumulateGrad's self time is its 50 us less its child's 20
    top = {k["name"]: k for k in r["top_kernels"]}
    assert top[ACC]["kind"] == "compute" and top[ACC]["self_us"] == pytest.approx(30.0)
    assert top["c10d::allreduce_"]["kind"] == "communication"


def test_only_the_same_threads_collectives_are_taken_out(tmp_path: Path) -> None:
    """Another thread's operator [40,45) while the main thread is blocked in c10d [30,50) is still compute
    (and overlaps the collectives): compute 50 + 5 = 55, overlap 35 of 60, exposed comm 25, idle 20. (A matmul:
    an `aten::add` there is bandwidth-bound, memory rather than compute, and overlaps the collectives all the same.)"""
    trace = nested_trace([host("aten::addmm", 40, 5, tid=2)])
    r = analyze_traces([write(tmp_path / "t.json", trace)])["ranks"]["0"]
    tb = r["temporal_breakdown"]
    assert tb["compute_pct"] == pytest.approx(55.0)
    assert tb["exposed_comm_pct"] == pytest.approx(25.0)
    assert tb["idle_pct"] == pytest.approx(20.0)
    assert r["comm_comp_overlap_pct"] == pytest.approx(100.0 * 35 / 60)


def test_interval_subtract() -> None:
    a = iv.union(np.array([0.0, 20.0, 50.0]), np.array([10.0, 40.0, 60.0]))
    b = iv.union(np.array([5.0, 25.0, 30.0, 60.0]), np.array([8.0, 28.0, 35.0, 70.0]))
    s, e = iv.subtract(a, b)
    assert s.tolist() == [0.0, 8.0, 20.0, 28.0, 35.0, 50.0]
    assert e.tolist() == [5.0, 10.0, 25.0, 30.0, 40.0, 60.0]
    assert iv.length((s, e)) == iv.subtract_length(a, b)
    empty = (np.zeros(0), np.zeros(0))
    assert iv.subtract(a, empty)[0].tolist() == a[0].tolist()
    assert len(iv.subtract(empty, b)[0]) == 0


# rank -> (compute %, exposed comm %, overlap %), to 0.1. Compute was 44.4 / 55.7 % while it held the bandwidth-bound
# operators (now memory) and the data loader's (now data wait); then 35.7 / 35.6 %, exposed comm 33.2 / 29.2 % and
# overlap 38.3 / 21.5 % while communication under another thread's operators counted as overlapped. The trace does
# not record its host's cores (another tool's), so that time is exposed communication now (audit 17, H1).
GLOO_EXPECTED = {"0": (17.6, 54.9, 0.0), "1": (28.4, 39.3, 0.0)}


def test_shared_gloo_trace_blocked_allreduce_is_communication() -> None:
    d = need_shared(SHARED / "cpu_gloo_2rank")
    rep = analyze_traces([d])
    for rank, (comp, exposed, overlap) in GLOO_EXPECTED.items():
        r = rep["ranks"][rank]
        tb = r["temporal_breakdown"]
        assert (round(tb["compute_pct"], 1), round(tb["exposed_comm_pct"], 1),
                round(r["comm_comp_overlap_pct"], 1)) == (comp, exposed, overlap)
        # non-compute is exposed comm and exposed memory, nothing else (a CPU trace has no other busy time)
        assert tb["non_compute_pct"] == pytest.approx(tb["exposed_comm_pct"] + tb["exposed_memory_pct"])
        assert tb["other_busy_pct"] == pytest.approx(0.0, abs=1e-9)
        assert r["verdict"]["bound"] == "communication-bound"
