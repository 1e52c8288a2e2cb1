"""The suite must not distort what it measures: a workload's throughput inside `stride bench` against
the same config run as `stride train` does (Trainer with its defaults), alternating in one process.

    .venv/bin/python benchmarks/suite_overhead.py [--workload ts_transformer_tiny] [--repeats 4] [--json]
Headline `suite_vs_train_ratio`: median over repeats of suite / train throughput, both sides the same
statistic (median of the suite's equal windows after warm-up, computed from each run's own step times),
so the ratio is the suite's overhead, not a difference of estimators (goal within 2 %). Also printed:
the suite's reported median against `stride train`'s summary figure (a mean over the timed steps).
"""

from __future__ import annotations

import argparse
import json
import statistics

from stride.bench.runner import run_workload, throughput_windows
from stride.bench.workloads import WORKLOADS
from stride.config import load_config
from stride.train.trainer import Trainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="ts_transformer_tiny")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    w = WORKLOADS[args.workload]
    extra = ["train.target_val_loss=none"]  # both sides run every step
    ratios, reported = [], []
    for i in range(args.repeats):
        runs: dict[str, tuple[float, float]] = {}
        for side in (("suite", "train") if i % 2 == 0 else ("train", "suite")):
            if side == "suite":
                runs[side] = (run_workload(w, "auto", None, extra)["throughput"]["median"], 0.0)
            else:
                cfg = load_config(overrides=[*w.overrides, *extra])
                trainer = Trainer(config=cfg, write_run_dir=False)
                mean = trainer.fit().summary["samples_per_s"]
                windows = throughput_windows(trainer.timer.step_seconds, cfg.metrics.skip_steps, cfg.train.batch_size)
                runs[side] = (statistics.median(windows), mean)
        ratios.append(runs["suite"][0] / runs["train"][0])
        reported.append(runs["suite"][0] / runs["train"][1])
        print(f"repeat {i}: suite {runs['suite'][0]:,.0f} samples/s, train {runs['train'][0]:,.0f} samples/s "
              f"(same statistic), ratio {ratios[-1]:.3f}; against train's summary mean {reported[-1]:.3f}")
    out = {"suite_vs_train_ratio": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
           "suite_reported_vs_train_summary_ratio": statistics.median(reported),
           "repeats": args.repeats, "workload": args.workload,
           "note": "both sides: median of equal windows of the steps after warm-up; the second ratio compares "
                   "the suite's median with stride train's mean over the same steps"}
    print(f"median suite/train throughput ratio: {out['suite_vs_train_ratio']:.3f} (goal within 0.98-1.02)")
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
