"""`stride bench [--suite quick|standard|full] [--workloads ...] [--device ...] [--out DIR] [--json]`.

Sweeps: `--sweep batch|tradeoffs|ttt|world`; `--sweep world [--world-sizes 1,2,4] [--strategies ddp,fsdp]
[--scaling weak,strong] [--repeats R]` runs each workload through `stride train` under torchrun at
each process count (stride.bench.world).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from stride.bench.workloads import TRADEOFFS
from stride.files import strict_json

# Options that only one --sweep reads: (argparse dest, the flag, the sweep, the default the help states).
SWEEP_OPTIONS: tuple[tuple[str, str, str, Any], ...] = (
    ("seeds", "--seeds", "ttt", 3),
    ("batch_sizes", "--batch-sizes", "batch", [16, 32, 64, 128, 256]),
    ("variants", "--variants", "tradeoffs", None),
    ("world_sizes", "--world-sizes", "world", ["1,2,4"]),
    ("strategies", "--strategies", "world", ["ddp,fsdp"]),
    ("scaling", "--scaling", "world", ["weak,strong"]),
    ("repeats", "--repeats", "world", 1),
)


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", default="quick", help="quick (default; make bench: ~25 s on 2 CPU cores at load "
                   "average 2.6, docs/bench.md), standard, full")
    p.add_argument("--workloads", nargs="+", default=None, help="run these workloads instead of a suite's "
                   "(default: the suite's)")
    p.add_argument("--device", default="auto", help="auto (default: a GPU when there is one), cpu, cuda, cuda:N")
    p.add_argument("--out", default=None, help="results directory (default runs/bench-<stamp>); results.json is "
                   "rewritten after every run, and the same command with the same --out resumes a stopped sweep; one "
                   "holding a train run or a stride sweep is refused")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value in every workload (changes what is measured; default: none)")
    p.add_argument("--sweep", choices=("batch", "tradeoffs", "ttt", "world"), default=None,
                   help="batch: throughput and memory against batch size; tradeoffs: each technique on/off; "
                   "ttt: time to the workload's target validation loss over --seeds seeds; "
                   "world: weak and strong scaling over process counts (torchrun, one core per rank); "
                   "default: none (the suite)")
    # The sweep options default to None so a value the user gave is told from the default: one given without its
    # --sweep is refused (SWEEP_OPTIONS), then `_fill_defaults` puts in the defaults the help states.
    p.add_argument("--seeds", type=int, default=None, help="seeds for --sweep ttt (default 3)")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=None,
                   help="batch sizes for --sweep batch (default 16 32 64 128 256)")
    p.add_argument("--variants", nargs="+", default=None,
                   help=f"tradeoff variants for --sweep tradeoffs: {', '.join(TRADEOFFS)} (default: all)")
    g = p.add_argument_group("--sweep world")
    g.add_argument("--world-sizes", nargs="+", default=None, metavar="N",
                   help="process counts, e.g. 1,2,4 or 1 2 4 (default 1,2,4; the 1-rank baseline always runs)")
    g.add_argument("--strategies", nargs="+", default=None, metavar="S", help="ddp, fsdp (default both)")
    g.add_argument("--scaling", nargs="+", default=None, metavar="MODE",
                   help="weak (per-rank batch fixed), strong (global batch fixed); default both")
    g.add_argument("--repeats", type=int, default=None,
                   help="runs per point, in alternating rounds (default 1; 3 or more on a shared machine)")
    p.add_argument("--json", action="store_true", help="print results.json's content as the last line")
    p.add_argument("--prices", default=None, help="USD per device-hour table for the report's cost figures "
                   "(TOML [prices]; default: the one shipped with stride, stride/report/prices.toml)")
    p.add_argument("--no-report", action="store_true", help="skip report.html and summary.md")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from stride.bench.workloads import SUITES, WORKLOADS
    from stride.config.errors import ConfigError, suggest

    if args.suite not in SUITES:
        raise ConfigError(f"--suite {args.suite!r} is not a suite{suggest(args.suite, list(SUITES))}; "
                          f"suites are {', '.join(SUITES)}")
    names = args.workloads or list(SUITES[args.suite])
    for n in names:
        if n not in WORKLOADS:
            raise ConfigError(f"--workloads: {n!r} is not a workload{suggest(n, list(WORKLOADS))}; "
                              f"workloads are {', '.join(WORKLOADS)}")
    _check_args(args)
    from stride.bench.runner import workload_config

    for device in sorted({workload_config(WORKLOADS[n], n, args.device, args.overrides).train.device
                          for n in names} - {args.device}):
        check_device(device, "--set train.device=")  # a --set that replaced --device: checked before any run too
    prices = None if args.no_report else _load_prices(args.prices)
    out = Path(args.out or f"runs/bench-{time.strftime('%Y%m%d-%H%M%S')}")
    _check_out(out, args)
    console = Console(stderr=True)
    if args.sweep == "world":
        results = _world(args, names, out, console)
    else:
        results = _variants(args, names, out, console)
        if results is None:
            return 130  # stopped (Ctrl-C, SIGTERM): what finished is in results.json, the rerun resumes
    _print_tables(results, args)
    print(f"results: {out / 'results.json'}")
    reported = prices is None or _write_report(out, prices)
    if args.json:
        print(strict_json.dumps(results, default=str))
    return 0 if reported else 1


def _variants(args: argparse.Namespace, names: list[str], out: Path, console: Any) -> dict[str, Any] | None:
    """Suite, batch, tradeoff and ttt sweeps: variants one by one, results.json after each, resumable."""
    from rich.text import Text

    from stride.bench.journal import ResultsJournal, ResumeError
    from stride.bench.progress import SweepProgress
    from stride.bench.results import ResultsError
    from stride.bench.stop import StopRequest
    from stride.bench.sweeps import plan_sweep, run_sweep, sweep_sections
    from stride.bench.table import ttt_line
    from stride.bench.workloads import WORKLOADS
    from stride.metrics.env import fingerprint
    from stride.shown_text import literal

    plan = plan_sweep(args.sweep, [WORKLOADS[n] for n in names], args.overrides, batch_sizes=args.batch_sizes,
                      variants=args.variants, seeds=args.seeds)
    suite = f"{args.sweep}-sweep" if args.sweep else ("custom" if args.workloads else args.suite)
    try:
        journal = ResultsJournal(out, suite, fingerprint(), [v.name for v in plan], sweep_sections(args.sweep))
    except ResumeError as exc:
        if isinstance(exc.__cause__, ResultsError):  # results.json itself cannot be read: bad input, not the config's
            from stride.files.input_file import InputFileError

            raise InputFileError(str(exc), out / "results.json") from exc  # said as `stride report` says it
        raise
    console.print(Text.assemble(("bench", "bold"), literal(
        f" {len(plan)} run(s) of {', '.join(names)}; {out / 'results.json'} is rewritten after each; if stopped, the "
        f"same command with --out {out} resumes")), soft_wrap=True)  # a path is text, not markup: `runs/[x]`
    progress = SweepProgress([(v.name, v.steps(args.device)) for v in plan], console)
    try:
        with StopRequest().installed() as stop:
            run_sweep(plan, args.device, journal, progress, out, stop)
    except KeyboardInterrupt as exc:  # SweepStopped (SIGTERM, Ctrl-C), or a second signal's
        progress.close()
        done = len(journal.entries)
        # no results.json yet; the unfinished workload's folder stays for the resume (audit 21, L2: "nothing
        # written" beside a folder of four files)
        where = f"are in {out / 'results.json'}" if done else "(none finished: no results written; the unfinished " \
            "workload's folder stays for the resume)"
        console.print(literal(f"stopped ({exc.args[0] if exc.args else 'interrupted'}): {done} of {len(plan)} run(s) "
                              f"finished {where}; rerun with --out {out} to resume"), soft_wrap=True)
        return None
    finally:
        progress.close()
    results = journal.write()
    if args.sweep == "ttt":
        for n, r in results["time_to_target"].items():
            console.print(literal(ttt_line(n, r)), soft_wrap=True)
    return results


def _world(args: argparse.Namespace, names: list[str], out: Path, console: Any) -> dict[str, Any]:
    from stride.bench.results import make_results
    from stride.bench.workloads import WORKLOADS
    from stride.bench.world import load_avg, plan_world, scaling_section, world_sweep
    from stride.metrics.env import fingerprint
    from stride.metrics.run_dir import RunDir
    from stride.shown_text import literal

    def log(line: str) -> None:  # names and paths: text, never markup
        console.print(literal(line), soft_wrap=True)

    world = _world_args(args)
    for n in names:  # every workload's plan checked before the first line is printed or the first run starts
        plan_world(WORKLOADS[n], args.device, *world, args.overrides, args.repeats)
    entries: list[dict[str, Any]] = []
    points: list[dict[str, Any]] = []
    plans: dict = {}
    load_before = load_avg()
    for n in names:
        log(f"bench {n}: world sweep ...")
        e, pts, plans = world_sweep(WORKLOADS[n], args.device, out, *world, args.overrides, args.repeats, log=log)
        entries += e
        points += pts
    scaling = scaling_section(points, plans, args.repeats, (load_before, load_avg()))
    results = make_results("world-sweep", fingerprint(), entries, scaling)
    RunDir(out).write_json("results.json", results)
    return results


def _print_tables(results: dict[str, Any], args: argparse.Namespace) -> None:
    from rich.console import Console

    from stride.bench.table import results_table, scaling_table, tradeoff_table

    term = Console()
    out_console = term if term.is_terminal else Console(width=160)  # wide tables in CI logs and files
    out_console.print(results_table(results))
    for n, matrix in (results.get("tradeoffs") or {}).items():
        out_console.print(tradeoff_table(n, matrix))
    if results.get("scaling") is not None:
        out_console.print(scaling_table(results["scaling"]))
        if args.repeats == 1:
            out_console.print("one run per point: each point's spread is its own timed steps', which holds no drift "
                              "between runs; on a shared machine use --repeats 3 or more")


def _check_args(args: argparse.Namespace) -> None:
    """Every count and name of the command line checked before anything runs: `--seeds 0` measured nothing and
    wrote an empty results.json, an unknown variant was a traceback after the plan. A sweep option given without
    its --sweep is refused (it was ignored: `--seeds 5` without `--sweep ttt` ran the quick suite, minutes, without a
    word), and so is a --device this machine cannot run (`cuda` without a GPU failed only once the first run had
    started, and `tpu` was reported as `--set train.device=tpu`, a --set the user never wrote). A --workloads,
    --batch-sizes or --variants value given twice is refused: it was measured twice under one name, then the report
    refused the results.json it had written (a traceback after the whole sweep)."""
    from stride.bench.workloads import check_variants
    from stride.config.errors import ConfigError

    for option, values, what in (("--seeds", [args.seeds], "seed"), ("--repeats", [args.repeats], "run per point"),
                                 ("--batch-sizes", args.batch_sizes, "sample per batch")):
        bad = next((v for v in values or [] if v is not None and v < 1), None)
        if bad is not None:
            raise ConfigError(f"{option} {bad}: need at least 1 {what}; nothing would be measured")
    if args.variants is not None:
        check_variants(args.variants)
    for option, values in (("--workloads", args.workloads), ("--batch-sizes", args.batch_sizes),
                           ("--variants", args.variants)):
        repeated = next((v for i, v in enumerate(values or []) if v in values[:i]), None)
        if repeated is not None:  # planned twice under one name: measured twice, then a results.json that
            # `stride report` refuses ("listed twice") after the whole sweep had run
            raise ConfigError(f"{option}: {repeated} is listed twice; give each once (a repeat would measure it "
                              "again under the same name); nothing was run")
    _check_sweep_options(args)
    _fill_defaults(args)
    if args.sweep == "world":
        _world_args(args)  # --world-sizes, --strategies, --scaling: their form, before anything is printed
    check_device(args.device, "--device ")


def _check_sweep_options(args: argparse.Namespace) -> None:
    """A ConfigError naming every sweep option given without the --sweep that reads it, and that --sweep."""
    from stride.config.errors import ConfigError

    stray = [(flag, sweep) for dest, flag, sweep, _ in SWEEP_OPTIONS
             if getattr(args, dest) is not None and args.sweep != sweep]
    if not stray:
        return
    needs = "; ".join(f"{flag} needs --sweep {sweep}" for flag, sweep in stray)
    it = "it" if len(stray) == 1 else "them"
    if args.sweep:  # one sweep a command: the option belongs to another
        raise ConfigError(f"{needs}; --sweep {args.sweep} would ignore {it}; drop {it} or run that sweep on its own; "
                          "nothing was run")
    what = "each of --workloads once" if args.workloads else f"the {args.suite} suite"
    raise ConfigError(f"{needs}; without --sweep, bench runs {what} and would ignore {it}; add the --sweep or drop "
                      f"{it}; nothing was run")


def _fill_defaults(args: argparse.Namespace) -> None:
    """The sweep options the user left out, at the defaults --help states."""
    for dest, _, _, default in SWEEP_OPTIONS:
        if getattr(args, dest) is None:
            setattr(args, dest, list(default) if isinstance(default, list) else default)


def check_device(spec: str, where: str) -> None:
    """`spec` (--device, or a config's train.device) one this machine can run, or a ConfigError naming `where`
    (`--device ` or `--set train.device=`, the value follows): the form (auto, cpu, cuda, cuda:N) as train.device
    checks it, then that the CUDA device is there."""
    from stride.config import load_config, set_key
    from stride.config.errors import ConfigError

    set_key(load_config(), "train.device", spec, where.rstrip(" ="))  # the form, in train.device's words
    if not spec.startswith("cuda"):
        return
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ConfigError(f"{where}{spec}: no CUDA device is available on this machine; use cpu or auto; "
                          "nothing was run")
    index = int(spec.partition(":")[2] or 0)
    if index >= count:
        raise ConfigError(f"{where}{spec}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}; "
                          "nothing was run")


def _check_out(out: Path, args: argparse.Namespace) -> None:
    """--out holding a training run or a sweep is refused before anything is written (stride.files.folder_kind);
    so is a world sweep's --out holding another suite's results.json, which it would replace (the other sweeps'
    journal refuses that itself: stride.bench.journal)."""
    from stride.files.folder_kind import FolderHoldsOther, refuse_others, what_it_holds

    refuse_others(out, "bench")
    if args.sweep == "world":
        other = [h for h in what_it_holds(out) if h.kind == "bench" and h.suite != "world-sweep"]
        if other:
            raise FolderHoldsOther(f"--out {out} holds {other[0].describe()}, which a world sweep's results.json would "
                                   "replace; nothing was written; use another --out")


def _load_prices(path: str | None) -> dict[str, float]:
    """The price table, read before the sweep: one the user named must exist, be a regular file (a FIFO or a
    directory is named as such) and parse (else exit 2, before an hour of runs); stride's own table missing only
    leaves the costs out."""
    from stride.config.errors import ConfigError
    from stride.files.input_file import InputFileError
    from stride.report.recommend import load_prices

    try:
        return load_prices(path)
    except FileNotFoundError as exc:
        if path is not None:
            raise ConfigError(f"--prices {path}: no such file (a TOML [prices] table, USD per device-hour)") from None
        print(f"{exc}: the report leaves costs out (--prices FILE)")
        return {}
    except ValueError as exc:
        if isinstance(exc.__cause__, InputFileError):  # "prices file P is a FIFO, not a regular file", ...
            raise ConfigError(f"--prices: {exc} (a TOML [prices] table, USD per device-hour)") from None
        raise ConfigError(f"--prices {exc}") from None


def _write_report(out: Path, prices: dict[str, float]) -> bool:
    """report.html and summary.md beside results.json (what `stride report DIR` writes); False, with one line on
    stderr, when the results cannot be reported: the measurements are done and stay in results.json, so that is
    said, never a traceback after the sweep."""
    import sys

    from stride.bench.results import ResultsError
    from stride.errors import one_line
    from stride.report.render import render_report

    try:
        html, md = render_report(out, prices, lambda line: print(f"stride bench: report note: {one_line(line)}",
                                                                 file=sys.stderr))
    except ResultsError as exc:
        print(f"stride bench: no report written: {one_line(str(exc))}; the measurements stay in "
              f"{out / 'results.json'}", file=sys.stderr)
        return False
    print(f"report: {html} and {md}")
    return True


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
        if sizes[-1] < 1:
            raise ConfigError(f"--world-sizes: {sizes[-1]} is not a process count (need >= 1); nothing was run")
    strategies, scalings = parse_list(args.strategies, "--strategies"), parse_list(args.scaling, "--scaling")
    # a value given twice is refused as --batch-sizes and --variants refuse one (it was dropped without a word)
    for option, values in (("--world-sizes", sizes), ("--strategies", strategies), ("--scaling", scalings)):
        repeated = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if repeated is not None:
            raise ConfigError(f"{option}: {repeated} is listed twice; give each once; nothing was run")
    return sizes, strategies, scalings
