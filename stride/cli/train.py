"""`stride train CONFIG [--set k=v ...] [--out DIR]`."""

from __future__ import annotations

import argparse


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="TOML run config, e.g. configs/quickstart.toml")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set optim.lr=3e-4 (repeatable)")
    p.add_argument("--out", default=None, help="run directory (default: <metrics.out_dir>/<stamp>-<name>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or log lines")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stride.config import load_config
    from stride.report.summary_table import print_summary
    from stride.train.trainer import Trainer

    cfg = load_config(args.config, args.overrides)
    if args.no_progress:
        cfg.metrics.progress = False
    result = Trainer(config=cfg, out=args.out).fit()
    from rich.console import Console

    term = Console()
    print_summary(result.summary, term if term.is_terminal else Console(width=120))
    print(f"run directory: {result.run_dir}")
    return 0
