"""The suite must not distort what it measures: a workload's throughput inside `stride bench` against
the same config run as `stride train` does (Trainer with its defaults), alternating in one process.

    python benchmarks/suite_overhead.py [--workload ts_transformer_tiny] [--repeats 4] [--json]
Headline `suite_vs_train_ratio` (median of suite / train throughput; goal within 2 %).
"""

from __future__ import annotations

import argparse
import json
import statistics

from stride.bench.runner import run_workload
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
    ratios = []
    for i in range(args.repeats):
        runs = []
        for side in (("suite", "train") if i % 2 == 0 else ("train", "suite")):
            if side == "suite":
                runs.append((side, run_workload(w, "auto", None, extra)["throughput"]["median"]))
            else:
                cfg = load_config(overrides=[*w.overrides, *extra])
                runs.append((side, Trainer(config=cfg, write_run_dir=False).fit().summary["samples_per_s"]))
        d = dict(runs)
        ratios.append(d["suite"] / d["train"])
        print(f"repeat {i}: suite {d['suite']:,.0f} samples/s, train {d['train']:,.0f} samples/s, "
              f"ratio {ratios[-1]:.3f}")
    out = {"suite_vs_train_ratio": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
           "repeats": args.repeats, "workload": args.workload,
           "note": "suite throughput is the median over 3 windows; train's is the mean over the same steps"}
    print(f"median suite/train throughput ratio: {out['suite_vs_train_ratio']:.3f} (goal within 0.98-1.02)")
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
