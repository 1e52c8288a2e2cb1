"""What the report's words say a figure is (outside audit 13): L1, a cost per million of the throughput's own unit
(tokens, env steps), not "samples"; L6(a), a `stride train` folder's MFU is the mean over its timed steps, not "at
median"; L6(c), a scaling efficiency above 1 is said to be superlinear, with why it may be."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stride.bench.results import make_results
from stride.report.recommend import recommend, scaling_advice
from stride.report.render import render_report

BREAKDOWN = {"data": 0.0, "forward": 0.3, "backward": 0.6, "optimizer": 0.05, "other": 0.05}


def _entry(name: str, unit: str, median: float, **kw) -> dict:
    return {"name": name, "version": 1, "throughput": {"unit": unit, "median": median, "min": median, "max": median,
                                                       "cv": 0.0, "n": 3},
            "mfu": 0.5, "peak_mem_bytes": 2**20, "time_to_target_s": None, "run_dir": None,
            "step_time_breakdown_s": BREAKDOWN, **kw}


@pytest.mark.parametrize(("unit", "noun"), [("tokens/s", "tokens"), ("env steps/s", "env steps"),
                                            ("samples/s", "samples")])
def test_cost_is_per_million_of_the_throughputs_unit(tmp_path: Path, unit: str, noun: str) -> None:
    # 25,655 tokens/s at 0.10 USD an hour (the audit's gpt_returns_small): 0.10 / 3600 / 25,655 x 1e6 = 0.0011 USD
    res = make_results("custom", {"gpus": []}, [_entry("w", unit, 25_655.0)])
    (r,) = recommend(res, {"cpu": 0.10}, speeds=None)
    assert r["usd_per_million_samples"] == pytest.approx(0.10 / 3600 / 25_655.0 * 1e6)
    assert r["cost_unit"] == noun
    (tmp_path / "results.json").write_text(json.dumps(res))
    render_report(tmp_path, {"cpu": 0.10})
    md = (tmp_path / "summary.md").read_text()
    assert f"Cost: 0.0011 USD per million {noun} (cpu)" in md
    if noun != "samples":
        assert "per million samples" not in md


def test_a_train_folder_reports_the_mean_over_its_timed_steps(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    summary = {"name": "q", "samples_per_s": 800.0, "step_time_s": 0.08, "mfu": 0.106, "peak_mem_bytes": 2**20,
               "step_time_breakdown_s": BREAKDOWN, "world_size": 1}
    (run / "summary.json").write_text(json.dumps(summary))
    render_report(run, {})
    md = (run / "summary.md").read_text()
    head = md.splitlines()[2]
    assert "MFU (mean over timed steps)" in head and "at median" not in head
    assert "throughput (over timed steps)" in head and "| 10.6% |" in md
    # a bench results.json, whose rates are at the median throughput (`rates_at`), keeps its heading
    res = make_results("custom", {"gpus": []}, [_entry("w", "samples/s", 1000.0, rates_at="the median ...")])
    (tmp_path / "results.json").write_text(json.dumps(res))
    render_report(tmp_path, {})
    head = (tmp_path / "summary.md").read_text().splitlines()[2]
    assert "MFU (at median)" in head and "throughput (median)" in head


def _point(eff: float, rounds: list[float]) -> dict:
    return {"workload": "m", "strategy": "ddp", "scaling": "strong", "world_size": 2, "per_rank_batch": 32,
            "global_batch": 64, "throughput": {"unit": "samples/s", "median": 2218.85, "min": 2218.85,
                                               "max": 2218.85, "cv": 0.0},
            "speedup": 2 * eff, "efficiency": eff, "efficiency_rounds": rounds, "exposed_comm_fraction": 0.05,
            "forward_time_per_sample_ratio": 1.0, "runqueue_wait_share": 0.01, "cores": 2, "oversubscribed": False}


def test_an_efficiency_above_one_is_called_superlinear() -> None:
    # the audit's strong point: 2218.85 / (2 x 989.59) = 1.121, one run per point
    eff = 2218.85 / (2 * 989.59)
    base = {**_point(1.0, [1.0]), "scaling": "baseline", "world_size": 1, "efficiency": 1.0}
    (a,) = scaling_advice({"scaling": {"points": [base, _point(eff, [eff])], "repeats": 1}})
    assert a["verdict"] == "scales" and "efficiency 1.12" in a["advice"]
    assert "superlinear" in a["advice"] and "one run per point" in a["advice"] and "--repeats" in a["advice"]
    (a,) = scaling_advice({"scaling": {"points": [base, _point(1.05, [1.1, 1.05, 1.0])], "repeats": 3}})
    assert "3 runs per point" in a["advice"]
    (a,) = scaling_advice({"scaling": {"points": [base, _point(0.9, [0.9])], "repeats": 1}})
    assert a["verdict"] == "scales" and "superlinear" not in a["advice"]
