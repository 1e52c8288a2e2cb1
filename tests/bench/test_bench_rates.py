"""Every rate in a bench row (throughput, MFU, timesteps/s) is at one step-time statistic, named in the header.

Audit: mlp_tiny's row said "throughput (median) 84,897 samples/s, MFU 12.0 %", but MFU (and timesteps/s)
came from the mean step time (summary samples_per_s 58,223): at the median throughput MFU is 17.4 %.
"""

from __future__ import annotations

import pytest
from rich.console import Console

from stride.bench.runner import make_entry, rates_at_median, run_workload
from stride.bench.table import results_table
from stride.bench.workloads import WORKLOADS
from stride.config import load_config

# the audit's mlp_tiny figures: batch 256, seq 8, MFU 12.0 % at the mean
PEAK = 332.8e9
MEAN = {"samples_per_s": 58_223.0, "timesteps_per_s": 58_223.0 * 8, "step_time_s": 256 / 58_223.0,
        "flops_per_step": 9.0e6, "peak_flops_per_s": PEAK, "peak_flops_source": "isa:fp32:test",
        "mfu_error": None}
MEAN["achieved_flops_per_s"] = MEAN["flops_per_step"] / MEAN["step_time_s"]
MEAN["mfu"] = MEAN["achieved_flops_per_s"] / PEAK


def test_rates_follow_the_median_throughput() -> None:
    at = rates_at_median(MEAN, "samples/s", 84_897.0)
    assert at["step_time_s"] == pytest.approx(256 / 84_897.0)
    assert at["timesteps_per_s"] == pytest.approx(84_897.0 * 8)
    assert at["mfu"] == pytest.approx(MEAN["flops_per_step"] * 84_897.0 / 256 / PEAK)
    assert at["mfu"] == pytest.approx(MEAN["mfu"] * 84_897.0 / 58_223.0)  # 12.0 % -> 17.5 %
    # tokens/s: the throughput is timesteps/s
    tok = rates_at_median(MEAN, "tokens/s", 2 * MEAN["timesteps_per_s"])
    assert tok["mfu"] == pytest.approx(2 * MEAN["mfu"]) and tok["timesteps_per_s"] == pytest.approx(
        2 * MEAN["timesteps_per_s"])
    # PPO's summary-shaped dict: env steps/s, an MFU but no achieved FLOP/s
    ppo = {"env_steps_per_s": 1000.0, "timesteps_per_s": 1000.0, "step_time_s": 0.5, "mfu": 0.01,
           "peak_flops_per_s": PEAK, "peak_flops_source": "x"}
    p = rates_at_median(ppo, "env steps/s", 1500.0)
    assert p["mfu"] == pytest.approx(0.015) and p["timesteps_per_s"] == pytest.approx(1500.0)
    assert p["step_time_s"] == pytest.approx(0.5 / 1.5)


def test_an_mfu_the_median_puts_above_the_peak_is_left_out() -> None:
    s = {**MEAN, "peak_flops_per_s": MEAN["achieved_flops_per_s"] * 1.1}
    with pytest.warns(UserWarning, match="MFU would be"):
        at = rates_at_median(s, "samples/s", 2 * MEAN["samples_per_s"])
    assert at["mfu"] is None and "above the peak" in at["mfu_error"]
    gone = rates_at_median({**MEAN, "mfu": None, "mfu_error": "peak wrong"}, "samples/s", 84_897.0)
    assert gone["mfu"] is None and gone["mfu_error"] == "peak wrong"
    assert rates_at_median(MEAN, "samples/s", None)["mfu"] is None


def test_the_row_shows_mfu_at_the_median_and_says_so() -> None:
    w = WORKLOADS["mlp_tiny"]
    cfg = load_config(overrides=list(w.overrides))
    windows = [84_897.0, 40_000.0, 90_000.0]
    entry = make_entry(w, w.name, cfg, windows, "{n} windows", {**MEAN, "peak_mem_bytes": 0,
                                                                  "step_time_breakdown_s": {"forward": 0.001}})
    assert entry["throughput"]["median"] == 84_897.0
    assert entry["mfu"] == pytest.approx(MEAN["mfu"] * 84_897.0 / 58_223.0)
    assert entry["timesteps_per_s"] == pytest.approx(84_897.0 * 8)
    assert "median of the 3 throughput figures" in entry["rates_at"]
    assert entry["timed_steps_mean"]["mfu"] == MEAN["mfu"]  # the summary's own, kept and named
    con = Console(record=True, width=200)
    con.print(results_table({"suite": "quick", "workloads": [entry]}))
    text = con.export_text()
    assert "MFU (at median)" in text and "throughput (median)" in text
    assert f"{100 * entry['mfu']:.1f}%" in text and f"{100 * MEAN['mfu']:.1f}%" not in text
    old = {k: v for k, v in entry.items() if k != "rates_at"}  # a results.json of an older stride
    con = Console(record=True, width=200)
    con.print(results_table({"suite": "quick", "workloads": [old]}))
    assert "(at mean)" in con.export_text()


def test_a_real_workload_entry_has_its_rates_at_one_step_time() -> None:
    w = WORKLOADS["mlp_tiny"]
    e = run_workload(w, "cpu", None, ["data.n_steps=1024", "data.n_assets=4", "train.steps=30", "train.val_every=0",
                                      "metrics.skip_steps=3", "train.threads=1"])
    median, batch = e["throughput"]["median"], e["config"]["train"]["batch_size"]
    step_s = batch / median
    assert e["step_time_s"] == pytest.approx(step_s)
    assert e["timesteps_per_s"] == pytest.approx(median * e["config"]["data"]["seq_len"])
    peak = e["timed_steps_mean"]["mfu"] and e["flops_per_step"] / e["timed_steps_mean"]["step_time_s"] / \
        e["timed_steps_mean"]["mfu"]
    assert e["mfu"] == pytest.approx(e["flops_per_step"] / step_s / peak)
