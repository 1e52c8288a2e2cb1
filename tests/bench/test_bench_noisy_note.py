"""The suite's table says when a workload's throughput spread shows a busy host (outside audit 12: cv 20-69% read
like any other figure)."""

from __future__ import annotations

from stride.bench.table import noisy_note, results_table


def _workload(name: str, cv: float) -> dict:
    return {"name": name, "throughput": {"unit": "samples/s", "median": 1000.0, "min": 900.0, "max": 1100.0, "cv": cv,
                                         "n": 5},
            "step_time_breakdown_s": {"forward": 0.1}, "time_to_target_s": None, "mfu": 0.1, "rates_at": True,
            "peak_mem_bytes": 2**20, "final_val_loss": 1.0}


def test_a_spread_above_ten_percent_is_named_with_its_workload() -> None:
    table = results_table({"suite": "quick", "workloads": [_workload("a", 0.02), _workload("b", 0.687)]})
    assert "spread above 10% (b 69%): the host was busy" in str(table.caption)
    assert "a 2%" not in str(table.caption)


def test_quiet_runs_get_no_note() -> None:
    assert noisy_note([_workload("a", 0.02), _workload("b", 0.1)]) == ""
    assert noisy_note([{**_workload("c", 0.5), "throughput": {"cv": None}}]) == ""
