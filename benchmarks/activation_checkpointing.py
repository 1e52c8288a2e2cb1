"""Activation checkpointing's tradeoff, measured: saved-activation bytes and step time of none / every_k / full.

The README's row for `train.activation_checkpointing` quotes both figures; this script prints them (outside audit
15: the memory figures reproduced exactly, the step-time cost had no command and read higher on another CPU).
Per model (the test's 4-layer tiny transformer at seq 16, and `small` at seq 64; batch 32, 1 thread), the three
modes are trained in turn within each round, rounds alternate, and the step-time ratio to `none` is the median over
rounds of each round's ratio (so a slow minute on a shared host moves all three modes of that round alike).

    .venv/bin/python benchmarks/activation_checkpointing.py [--json] [--rounds 4] [--quick]

Saved bytes are exact and host-independent; the time ratio depends on the CPU: quote it with the CPU model and
the load average this prints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODES = ("none", "every_k", "full")
MODELS = {  # name -> (overrides, steps)
    "tiny": (["model.n_layers=4", "data.seq_len=16"], 150),
    "small": (['model.size="small"', "data.seq_len=64"], 20),
}
BASE = ["data.n_assets=4", "data.n_steps=1024", "data.horizons=[1, 5]", "train.batch_size=32", "train.val_every=0",
        "train.threads=1", "metrics.progress=false", "metrics.flops=false", "metrics.skip_steps=2",
        "optim.warmup_steps=2", "train.ac_every=2"]


def run_once(model: str, mode: str, steps: int) -> dict[str, float]:
    from stride.config import load_config
    from stride.train.trainer import Trainer

    overrides, _ = MODELS[model]
    cfg = load_config(overrides=[*BASE, *overrides, f"train.steps={steps}",
                                 f'train.activation_checkpointing="{mode}"'])
    s = Trainer(config=cfg, write_run_dir=False).fit().summary
    return {"step_s": s["step_time_s"], "saved_activation_bytes": s["saved_activation_bytes"],
            "checkpointed_blocks": s["activation_checkpointed_blocks"]}


def measure(model: str, rounds: int, steps: int) -> dict[str, object]:
    per_round: list[dict[str, dict[str, float]]] = []
    for r in range(rounds):
        order = MODES if r % 2 == 0 else tuple(reversed(MODES))  # alternate which mode goes first
        per_round.append({mode: run_once(model, mode, steps) for mode in order})
    out: dict[str, object] = {"steps": steps, "rounds": rounds}
    for mode in MODES:
        ratios = [rd[mode]["step_s"] / rd["none"]["step_s"] for rd in per_round]
        out[mode] = {
            "saved_activation_bytes": per_round[0][mode]["saved_activation_bytes"],
            "checkpointed_blocks": per_round[0][mode]["checkpointed_blocks"],
            "step_ms_median": 1e3 * statistics.median(rd[mode]["step_s"] for rd in per_round),
            "step_time_ratio_vs_none": statistics.median(ratios),
            "ratio_per_round": [round(x, 3) for x in ratios],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="2 rounds of a few steps: checks the script, measures little")
    args = ap.parse_args(argv)
    from stride.metrics.env import cpu_id

    rounds = 2 if args.quick else args.rounds
    result: dict[str, object] = {"cpu": cpu_id(), "load_before": os.getloadavg()[0]}
    for model, (_, steps) in MODELS.items():
        result[model] = measure(model, rounds, 4 if args.quick else steps)
    result["load_after"] = os.getloadavg()[0]
    for model in MODELS:
        m = result[model]
        assert isinstance(m, dict)
        print(f"{model}: " + "; ".join(
            f"{mode} {m[mode]['saved_activation_bytes'] / 1e6:.2f} MB saved, "
            f"step x{m[mode]['step_time_ratio_vs_none']:.2f} (rounds {m[mode]['ratio_per_round']})" for mode in MODES))
    print(f"cpu {result['cpu']}, load {result['load_before']:.1f} -> {result['load_after']:.1f}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
