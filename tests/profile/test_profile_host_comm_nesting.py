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
    return {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1},
            "traceEvents": ev}


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
# operators (now memory) and the data loader's (now data wait); exposed comm and overlap are reckoned against all
# operator work, as before, and did not move.
GLOO_EXPECTED = {"0": (35.7, 33.2, 38.3), "1": (35.6, 29.2, 21.5)}


def test_shared_gloo_trace_blocked_allreduce_is_communication() -> None:
    d = need_shared(SHARED / "cpu_gloo_2rank")
    rep = analyze_traces([d])
    for rank, (comp, exposed, overlap) in GLOO_EXPECTED.items():
        r = rep["ranks"][rank]
        tb = r["temporal_breakdown"]
        assert (round(tb["compute_pct"], 1), round(tb["exposed_comm_pct"], 1),
                round(r["comm_comp_overlap_pct"], 1)) == (comp, exposed, overlap)
        # non-compute: exposed comm, exposed memory, and bandwidth-bound operators under another thread's collective
        assert tb["non_compute_pct"] >= tb["exposed_comm_pct"] + tb["exposed_memory_pct"] - 1e-9
        assert r["verdict"]["bound"] == "communication-bound"
