"""`stride report` of a `--sweep ttt` and of a world sweep (outside audit of the benchmark figures).

Before: a seed that missed its target read "-" (as "no target"), the results' time to target over the seeds was not
shown, the cost per run to target priced the fastest seed's 8.9 s (and called the seeds "configurations"), an
oversubscribed point's MFU divided by cores the host does not have, and the recommendation named `weak n4` on 2 cores,
a different global batch on time-shared cores, the fastest configuration.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stride.bench.results import make_results
from stride.report.recommend import recommend
from stride.report.render import render_report

BREAKDOWN = {"forward": 0.3, "backward": 0.6, "optimizer": 0.05, "other": 0.05}
PRICES = {"cpu": 3.6}  # USD an hour: 0.001 USD a second


def _entry(name: str, median: float, ttt: float | None = None, target: float | None = None, mfu: float = 0.1,
           **kw: Any) -> dict[str, Any]:
    return {"name": name, "version": 1, "config": {},
            "throughput": {"unit": "samples/s", "median": median, "min": median, "max": median, "cv": 0.0, "n": 1},
            "mfu": mfu, "rates_at": "median", "peak_mem_bytes": 2**20, "time_to_target_s": ttt,
            "target_val_loss": target, "run_dir": None, "step_time_breakdown_s": dict(BREAKDOWN), **kw}


def _write(tmp_path: Path, results: dict[str, Any]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "results.json").write_text(json.dumps(results))
    return tmp_path


def _seeds(times: list[float | None]) -> dict[str, Any]:
    medians = [382.0, 650.0, 613.0, 500.0][:len(times)]
    entries = [_entry(f"w+seed{k}", m, t, 1.37) for k, (m, t) in enumerate(zip(medians, times, strict=True))]
    return make_results("ttt-sweep", {}, entries)


def test_median_over_every_seed_counts_a_miss_as_never() -> None:
    from stride.bench.sweeps import median_with_misses, ttt_summary

    assert median_with_misses([11.5, 8.9, None]) == 11.5  # the hits' median is 10.2
    assert median_with_misses([3.0, None]) is None  # the midpoint of a hit and a miss is never reached
    assert median_with_misses([1.0, None, None]) is None
    assert median_with_misses([4.0, 1.0, 3.0, None]) == 3.5
    assert median_with_misses([]) is None
    s = ttt_summary([{"time_to_target_s": t, "target_val_loss": 1.37} for t in (11.5, 8.9, None)])
    assert s["median_all_s"] == 11.5 and s["seconds"]["median"] == pytest.approx(10.2) and s["missed"] == 1


def test_a_ttt_sweep_is_priced_at_the_median_over_every_seed(tmp_path: Path) -> None:
    res = _seeds([11.5, 8.9, None])
    [r] = recommend(res, PRICES, speeds=None)
    # the median seed (613) stands for the configuration; the cost to target is 11.5 s of 3.6 USD an hour
    assert r["seeds"] == 3 and r["configurations"] == 1 and r["fastest"] == "w+seed2"
    assert r["throughput"] == 613.0 and r["time_to_target_s"] == 11.5
    assert r["usd_per_run_to_target"] == pytest.approx(3.6 * 11.5 / 3600)  # was 3.6 * 8.9 / 3600 (the best seed)
    assert r["usd_per_million_samples"] == pytest.approx(3.6 / 3600 / 613.0 * 1e6)
    html, md = render_report(_write(tmp_path, res), PRICES)
    text = md.read_text()
    assert "| w+seed2 | 613 samples/s | 1 run | 10.0% | 1 MiB | - | missed (target 1.37) |" in text  # was "-"
    assert ("- w: time to val loss 1.37: median over all 3 seeds, a miss counted as never: 11.5 s; the 2 that "
            "reached it: median 10.2 s (min 8.9 s, max 11.5 s); missed 1 of 3") in text
    assert "one configuration over 3 seeds: median 613 samples/s across the seeds (seeds from 382 to 650)" in text
    assert ("0.0115 USD per run to target (11.5 s to target, median over 3 seeds, a miss counted as never; 1 of 3 "
            "missed)") in text
    assert "configurations" not in text.split("## Recommendations")[1]
    page = html.read_text()
    assert "<h2>Time to target</h2>" in page and "missed (target 1.37)" in page
    assert "median over all 3 seeds, a miss counted as never: 11.5 s" in page


def test_a_ttt_sweep_whose_median_seed_missed_says_so(tmp_path: Path) -> None:
    res = _seeds([None, 8.9, None])
    [r] = recommend(res, PRICES, speeds=None)
    assert r["usd_per_run_to_target"] is None and r["time_to_target_s"] is None
    _, md = render_report(_write(tmp_path, res), PRICES)
    text = md.read_text()
    assert ("per run to target: not computed: 2 of 3 seeds missed the target (val loss 1.37), so the median over "
            "the seeds, a miss counted as never, is not reached") in text
    assert "median over all 3 seeds, a miss counted as never: not reached; the 1 that reached it" in text


def test_a_fastest_configuration_that_missed_is_said(tmp_path: Path) -> None:
    res = make_results("batch-sweep", {}, [_entry("w+bs32", 400.0, 5.0, 1.37), _entry("w+bs64", 600.0, None, 1.37)])
    [r] = recommend(res, PRICES, speeds=None)
    assert r["fastest"] == "w+bs64" and r["usd_per_run_to_target"] is None
    _, md = render_report(_write(tmp_path, res), PRICES)
    assert ("per run to target: not computed: w+bs64 missed the target (val loss 1.37); 1 other configuration(s) "
            "reached it (w+bs32)") in md.read_text()  # was: no word of the cost to target


def _world() -> dict[str, Any]:
    def point(scaling: str, n: int, batch: int, tput: float) -> dict[str, Any]:
        t = {"unit": "samples/s", "median": tput, "min": tput, "max": tput, "cv": 0.0, "n": 1}
        label = "n1" if n == 1 else f"ddp-{scaling}-n{n}"
        return {"workload": "mlp", "strategy": "single" if n == 1 else "ddp", "scaling": scaling, "world_size": n,
                "per_rank_batch": batch, "global_batch": batch * n, "entry": f"mlp+{label}", "throughput": t,
                "speedup": tput / 30000.0, "efficiency": tput / 30000.0 / n, "exposed_comm_fraction": None,
                "cores": 2, "ranks_per_core": n / 2, "oversubscribed": n > 2}

    points = [point("baseline", 1, 256, 30000.0), point("weak", 2, 256, 26000.0), point("strong", 2, 128, 17000.0),
              point("weak", 4, 256, 40000.0), point("strong", 4, 64, 11000.0)]
    mfus = {"mlp+n1": 0.1, "mlp+ddp-weak-n2": 0.044, "mlp+ddp-strong-n2": 0.029, "mlp+ddp-weak-n4": 0.0334,
            "mlp+ddp-strong-n4": 0.0091}
    entries = [_entry(p["entry"], p["throughput"]["median"], mfu=mfus[p["entry"]], world_size=p["world_size"])
               for p in points]
    return make_results("world-sweep", {}, entries, {"points": points, "pinning": {}, "repeats": 1})


def test_oversubscribed_mfu_is_over_the_hosts_peak(tmp_path: Path) -> None:
    html, md = render_report(_write(tmp_path, _world()), PRICES)
    text = md.read_text()
    # 4 ranks on 2 cores: each rank's 3.34 % divides by a core of its own; over the host's 2 cores, 6.68 %
    assert "| mlp+ddp-weak-n4 | 40,000 samples/s | 1 run | 6.7% (host peak, 4 ranks on 2 cores) |" in text
    assert "| mlp+ddp-strong-n4 | 11,000 samples/s | 1 run | 1.8% (host peak, 4 ranks on 2 cores) |" in text
    assert "| mlp+ddp-weak-n2 | 26,000 samples/s | 1 run | 4.4% |" in text  # 2 ranks on 2 cores: as measured
    assert "host peak: an oversubscribed point's MFU is the whole job's FLOP/s" in text
    assert "6.7% (host peak, 4 ranks on 2 cores)" in html.read_text()


def test_bench_table_marks_oversubscribed_mfu() -> None:
    from rich.console import Console

    from stride.bench.table import results_table

    console = Console(width=300, record=True)
    console.print(results_table(_world()))
    out = console.export_text()
    row = next(line for line in out.splitlines() if "mlp+ddp-weak-n4" in line)
    assert "6.7% (host peak)" in row and "3.3%" not in row


def test_recommendation_ranks_only_alternatives_of_one_workload(tmp_path: Path) -> None:
    [r] = recommend(_world(), PRICES, speeds=None)
    # weak n4 (40,000 samples/s, a global batch of 1024 on 4 ranks time-sharing 2 cores) was "fastest"
    assert r["fastest"] == "mlp+n1" and r["throughput"] == 30000.0 and r["configurations"] == 2
    assert r["not_ranked"] == {
        "mlp+ddp-weak-n2": "weak scaling: global batch 512, not the baseline's 256: another workload",
        "mlp+ddp-weak-n4": ("oversubscribed: 4 ranks on 2 cores; weak scaling: global batch 1024, not the "
                            "baseline's 256: another workload"),
        "mlp+ddp-strong-n4": "oversubscribed: 4 ranks on 2 cores"}
    assert r["usd_per_million_samples"] == pytest.approx(3.6 / 3600 / 30000.0 * 1e6)
    _, md = render_report(_write(tmp_path, _world()), PRICES)
    assert ("fastest of 2 configurations: mlp+n1 at 30,000 samples/s; not ranked: mlp+ddp-weak-n2 (weak scaling"
            in md.read_text())
