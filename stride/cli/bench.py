"""`stride bench [--suite quick|standard|full] [--workloads ...] [--device ...] [--out DIR] [--json]`.

Sweeps: `--sweep batch|tradeoffs|ttt|world`; `--sweep world [--world-sizes 1,2,4] [--strategies ddp,fsdp]
[--scaling weak,strong] [--repeats R]` runs each workload through `stride train` under torchrun at
each process count (stride.bench.world).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", default="quick", help="quick (default, ~1-2 min on 2 CPU cores), standard, full")
    p.add_argument("--workloads", nargs="+", default=None, help="run these workloads instead of a suite's")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    p.add_argument("--out", default=None, help="results directory (default runs/bench-<stamp>)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value in every workload (changes what is measured)")
    p.add_argument("--sweep", choices=("batch", "tradeoffs", "ttt", "world"), default=None,
                   help="batch: throughput and memory against batch size; tradeoffs: each technique on/off; "
                   "ttt: time to the workload's target validation loss over --seeds seeds; "
                   "world: weak and strong scaling over process counts (torchrun, one core per rank)")
    p.add_argument("--seeds", type=int, default=3, help="seeds for --sweep ttt")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32, 64, 128, 256],
                   help="batch sizes for --sweep batch")
    p.add_argument("--variants", nargs="+", default=None, help="tradeoff variants (default: all)")
    g = p.add_argument_group("--sweep world")
    g.add_argument("--world-sizes", nargs="+", default=["1,2,4"], metavar="N",
                   help="process counts, e.g. 1,2,4 or 1 2 4 (the 1-rank baseline always runs)")
    g.add_argument("--strategies", nargs="+", default=["ddp,fsdp"], metavar="S", help="ddp, fsdp (default both)")
    g.add_argument("--scaling", nargs="+", default=["weak,strong"], metavar="MODE",
                   help="weak (per-rank batch fixed), strong (global batch fixed); default both")
    g.add_argument("--repeats", type=int, default=1,
                   help="runs per point, in alternating rounds (3 or more on a shared machine)")
    p.add_argument("--json", action="store_true", help="print results.json's content as the last line")
    p.add_argument("--prices", default="configs/prices.toml",
                   help="USD per device-hour table for the report's cost figures (TOML [prices])")
    p.add_argument("--no-report", action="store_true", help="skip report.html and summary.md")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from stride.bench.results import make_results
    from stride.bench.runner import run_workload
    from stride.bench.sweeps import batch_sweep, time_to_target, tradeoff_matrix
    from stride.bench.table import results_table, scaling_table, tradeoff_table
    from stride.bench.workloads import SUITES, WORKLOADS
    from stride.bench.world import load_avg, scaling_section, world_sweep
    from stride.config.errors import ConfigError, suggest
    from stride.metrics.env import fingerprint
    from stride.metrics.run_dir import RunDir

    if args.suite not in SUITES:
        raise ConfigError(f"--suite {args.suite!r} is not a suite{suggest(args.suite, list(SUITES))}; "
                          f"suites are {', '.join(SUITES)}")
    names = args.workloads or list(SUITES[args.suite])
    for n in names:
        if n not in WORKLOADS:
            raise ConfigError(f"--workloads: {n!r} is not a workload{suggest(n, list(WORKLOADS))}; "
                              f"workloads are {', '.join(WORKLOADS)}")
    out = Path(args.out or f"runs/bench-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir = RunDir(out)
    console = Console(stderr=True)
    entries = []
    matrices = {}
    ttts = {}
    world = _world_args(args) if args.sweep == "world" else None
    scaling_points: list = []
    plans: dict = {}
    load_before = load_avg()
    for n in names:
        console.print(f"[bold]bench[/] {n} ...")
        if args.sweep == "batch":
            entries += batch_sweep(WORKLOADS[n], args.device, out, args.batch_sizes, args.overrides)
        elif args.sweep == "ttt":
            res = time_to_target(WORKLOADS[n], args.device, out, args.seeds, args.overrides)
            entries += res.pop("entries")
            ttts[n] = res
            sec = res["seconds"]
            console.print(f"  time to target {res['target_val_loss']}: median {sec['median']} s "
                          f"(min {sec['min']}, max {sec['max']}), missed {res['missed']} of {res['runs']}")
        elif args.sweep == "world":
            assert world is not None
            e, pts, plans = world_sweep(WORKLOADS[n], args.device, out, *world, args.overrides, args.repeats,
                                       log=console.print)
            entries += e
            scaling_points += pts
        elif args.sweep == "tradeoffs":
            e, matrices[n] = tradeoff_matrix(WORKLOADS[n], args.device, out, args.variants, args.overrides)
            entries += e
        else:
            entries.append(run_workload(WORKLOADS[n], args.device, out, args.overrides))
    suite = f"{args.sweep}-sweep" if args.sweep else ("custom" if args.workloads else args.suite)
    scaling = (scaling_section(scaling_points, plans, args.repeats, (load_before, load_avg()))
               if args.sweep == "world" else None)
    results = make_results(suite, fingerprint(), entries, scaling)
    if matrices:
        results["tradeoffs"] = matrices
    if ttts:
        results["time_to_target"] = ttts
    run_dir.write_json("results.json", results)
    term = Console()
    out_console = term if term.is_terminal else Console(width=160)  # wide tables in CI logs and files
    out_console.print(results_table(results))
    for n, matrix in matrices.items():
        out_console.print(tradeoff_table(n, matrix))
    if scaling is not None:
        out_console.print(scaling_table(scaling))
        if args.repeats == 1:
            out_console.print("one run per point: no spread; on a shared machine use --repeats 3 or more")
    print(f"results: {out / 'results.json'}")
    if not args.no_report:
        _write_report(out, args.prices)
    if args.json:
        print(json.dumps(results, default=str))
    return 0


def _write_report(out: Path, prices_path: str) -> None:
    """report.html and summary.md beside results.json (what `stride report DIR` writes)."""
    from stride.report.recommend import load_prices
    from stride.report.render import render_report

    try:
        prices = load_prices(prices_path)
    except FileNotFoundError:
        print(f"no price table at {prices_path}: the report leaves costs out (--prices FILE)")
        prices = {}
    html, md = render_report(out, prices)
    print(f"report: {html} and {md}")


def _world_args(args: argparse.Namespace) -> tuple[list[int], list[str], list[str]]:
    """--world-sizes, --strategies, --scaling as lists (commas or spaces), checked."""
    from stride.bench.scaling import parse_list
    from stride.config.errors import ConfigError

    sizes = []
    for v in parse_list(args.world_sizes, "--world-sizes"):
        try:
            sizes.append(int(v))
        except ValueError as exc:
            raise ConfigError(f"--world-sizes: {v!r} is not a process count") from exc
    return sizes, parse_list(args.strategies, "--strategies"), parse_list(args.scaling, "--scaling")
