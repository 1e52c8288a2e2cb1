"""The benchmark suite's arithmetic and schema, and one real quick workload through the CLI."""

from __future__ import annotations

import json

import pytest

from stride.bench.results import ResultsError, load_results, make_results, validate_results
from stride.bench.runner import throughput_windows
from stride.bench.stats import bootstrap_ci, spread
from stride.bench.workloads import SUITES, WORKLOADS
from stride.cli.main import main
from stride.config import load_config


def test_spread_by_hand() -> None:
    s = spread([1.0, 2.0, 3.0, 6.0])
    assert s["median"] == 2.5 and s["min"] == 1.0 and s["max"] == 6.0 and s["n"] == 4
    # population std of [1, 2, 3, 6] is sqrt(3.5) around mean 3
    assert s["cv"] == pytest.approx(3.5**0.5 / 3.0)
    assert spread([])["median"] is None
    # one value has no spread: null, not a cv of 0 that reads as a perfectly steady measurement
    assert spread([5.0]) == {"median": 5.0, "min": 5.0, "max": 5.0, "cv": None, "n": 1}


def test_bootstrap_ci_of_the_median() -> None:
    assert bootstrap_ci([1.02] * 10) == (1.02, 1.02)  # no spread, no interval
    vals = [0.9, 0.95, 1.0, 1.0, 1.0, 1.05, 1.1, 1.3]
    lo, hi = bootstrap_ci(vals)
    # a resampled median is the mean of two of the values: bounded by them, and the interval holds the median
    assert 0.9 <= lo <= 1.0 <= hi <= 1.3 and bootstrap_ci(vals) == (lo, hi)  # fixed seed: reproducible
    assert bootstrap_ci(vals, level=0.5)[1] - bootstrap_ci(vals, level=0.5)[0] <= hi - lo
    with pytest.raises(ValueError, match="no values"):
        bootstrap_ci([])


def test_throughput_windows_skip_warmup() -> None:
    # 2 warm-up steps of 1 s, then 6 steps: windows of 2 steps taking 0.5, 1.0, 2.0 s with batch 10
    times = [1.0, 1.0, 0.25, 0.25, 0.5, 0.5, 1.0, 1.0]
    assert throughput_windows(times, skip=2, batch=10) == [40.0, 20.0, 10.0]


def test_every_workload_config_is_valid() -> None:
    for w in WORKLOADS.values():
        load_config(overrides=list(w.overrides))
    for names in SUITES.values():
        assert set(names) <= set(WORKLOADS)


def test_results_schema_errors(tmp_path) -> None:
    with pytest.raises(ResultsError, match="not a stride results file"):
        validate_results({"workloads": []})
    bad = make_results("quick", {}, [])
    bad["workloads"] = [{"name": "x", "throughput": {"unit": "samples/s"}}]
    with pytest.raises(ResultsError, match=r"workloads\[0\] \(x\) is missing 'mfu'"):
        validate_results(bad)
    (tmp_path / "r.json").write_text("{truncated")
    with pytest.raises(ResultsError, match="not valid JSON"):
        load_results(tmp_path / "r.json")


@pytest.mark.slow
def test_bench_cli_writes_valid_results(tmp_path, capsys) -> None:
    rc = main(["bench", "--workloads", "mlp_tiny", "--out", str(tmp_path), "--set", "train.steps=12",
               "--set", "train.val_every=12", "--json"])
    assert rc == 0
    res = load_results(tmp_path / "results.json")
    (w,) = res["workloads"]
    assert w["name"] == "mlp_tiny" and w["throughput"]["median"] > 0 and w["steps"] == 12
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["suite"] == "custom"
    assert (tmp_path / "mlp_tiny" / "summary.json").is_file()
    html = (tmp_path / "report.html").read_text()  # `stride bench` writes the report as `stride report` does
    assert "<svg" in html and "mlp_tiny" in html and "mlp_tiny" in (tmp_path / "summary.md").read_text()


@pytest.mark.slow
def test_tradeoff_matrix_and_batch_sweep() -> None:
    from stride.bench.sweeps import batch_sweep, tradeoff_matrix

    w = WORKLOADS["mlp_tiny"]
    small = ["data.n_steps=1024", "data.n_assets=4", "train.steps=6", "train.val_every=6", "train.batch_size=64"]
    # mlp_tiny's own batch (256): at 64 the bf16 copies of its 140k weights that autocast saves for backward
    # (0.28 MB, counted: they live from forward to backward) outweigh the halved activations (0.46 -> 0.23 MB)
    entries, m = tradeoff_matrix(w, "cpu", None, ["baseline", "ac_full", "bf16"], [*small, "train.batch_size=256"])
    assert [e["name"] for e in entries] == ["mlp_tiny+baseline", "mlp_tiny+ac_full", "mlp_tiny+bf16"]
    assert m["baseline"]["speed_ratio"] == 1.0 and m["baseline"]["val_loss_delta"] == 0.0
    assert all(v["bitwise_repeatable"] for v in m.values())  # deterministic mode on CPU
    assert m["ac_full"]["activation_ratio"] < 0.5 and m["ac_full"]["val_loss_delta"] == 0.0
    assert m["bf16"]["activation_ratio"] < 0.8
    sweep = batch_sweep(w, "cpu", None, [32, 64], small)
    assert [e["config"]["train"]["batch_size"] for e in sweep] == [32, 64]
    with pytest.raises(ValueError, match="unknown tradeoff variant"):
        tradeoff_matrix(w, "cpu", None, ["turbo"], small)


@pytest.mark.slow
def test_time_to_target_counts_misses() -> None:
    from stride.bench.sweeps import time_to_target

    w = WORKLOADS["mlp_tiny"]
    small = ["data.n_steps=1024", "data.n_assets=4", "train.steps=6", "train.val_every=3", "train.batch_size=64"]
    hit = time_to_target(w, "cpu", None, 2, [*small, "train.target_val_loss=100.0"])
    assert hit["missed"] == 0 and hit["seconds"]["n"] == 2 and all(e["steps"] == 3 for e in hit["entries"])
    miss = time_to_target(w, "cpu", None, 2, [*small, "train.target_val_loss=1e-9"])
    assert miss["missed"] == 2 and miss["seconds"]["median"] is None
    assert [e["config"]["train"]["seed"] for e in miss["entries"]] == [0, 1]


def test_time_to_target_line_is_rounded_and_says_when_no_seed_reached_it() -> None:
    from stride.bench.sweeps import ttt_summary
    from stride.bench.table import ttt_line

    seeds = [{"time_to_target_s": t, "target_val_loss": 1.5} for t in (3.001146393999079, 1.1499623999989126,
                                                                        4.852330387999245, None)]
    line = ttt_line("w", ttt_summary(seeds))
    # it printed the raw floats: "median 3.001146393999079 s (min 1.1499623999989126, ...)"
    # and the hits' median stood alone as the time to target: over all 4 seeds, a miss counted as never, the median
    # is (3.0 + 4.85) / 2
    assert line == ("  w: time to val loss 1.5: median over all 4 seeds, a miss counted as never: 3.9 s; the 3 that "
                    "reached it: median 3.0 s (min 1.1 s, max 4.9 s); missed 1 of 4")
    none = ttt_line("w", ttt_summary([{"time_to_target_s": None, "target_val_loss": 1e-9}] * 2))
    assert none == "  w: time to val loss 1e-09: no run reached it; missed 2 of 2"  # was "median None s (...)"
