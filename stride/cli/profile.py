"""`stride profile CONFIG [--steps N] [--set k=v] [--out DIR] [--json]`: train under torch.profiler,
write one Chrome trace per rank, and print the bottleneck analysis of the traced steps."""

from __future__ import annotations

import argparse
import json


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="TOML run config")
    p.add_argument("--steps", type=int, default=3, help="active (traced) steps (default 3)")
    p.add_argument("--wait", type=int, default=1, help="steps before warm-up (default 1)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up steps traced but discarded (default 1)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", default=None, help="run directory; traces go to DIR/traces/")
    p.add_argument("--json", action="store_true", help="print the analysis as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stride.config import load_config
    from stride.config.errors import ConfigError
    from stride.profile.analyze import analyze_traces
    from stride.train.profiling import ProfilerCallback, steps_needed
    from stride.train.trainer import Trainer

    for name in ("steps", "wait", "warmup"):
        if getattr(args, name) < (1 if name == "steps" else 0):
            raise ConfigError(f"--{name} = {getattr(args, name)} is out of range")
    n = steps_needed(args.wait, args.warmup, args.steps)
    cfg = load_config(args.config, [*args.overrides, f"train.steps={n}", "train.val_every=0",
                                    "train.target_val_loss=none", "metrics.progress=false"])
    cb = ProfilerCallback(wait=args.wait, warmup=args.warmup, active=args.steps)  # -> <run dir>/traces
    result = Trainer(config=cfg, out=args.out, callbacks=[cb]).fit()
    report = analyze_traces([cb.out_dir])
    if result.run_dir:
        (result.run_dir / "analysis.json").write_text(json.dumps(report, default=float, indent=1))
    if args.json:
        print(json.dumps(report, default=float))
        return 0
    from stride.profile.render import render_report

    render_report(report)
    print(f"traces: {cb.out_dir}; analysis: {result.run_dir / 'analysis.json' if result.run_dir else '-'}")
    return 0
