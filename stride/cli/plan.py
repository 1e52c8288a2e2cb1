"""`stride plan`: predict step time, memory and cost; recommend a layout and hardware.

  stride plan --model llama3-8b --hardware h100 --devices 64 [--global-batch B] [--seq S] [--json]
  stride plan --model llama3-70b --compare-hardware h100-sxm:64,h200:64,a100-80gb:128 --tokens 1e11 [--sort cost]
  stride plan --from-csv data/perfmodel/published_dev.csv --json
  stride plan --list-hardware | --list-models
  stride plan --workload ts_transformer_small|run.toml [--set key=value] --hardware local-cpu --devices 2
  stride plan probe --out local.toml [--threads 1] [--comm-profile gloo.toml]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import time
from pathlib import Path

from stride.config.errors import ConfigError


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=["calibrate", "probe"],
                        help="calibrate: fit factors from runs; probe: measure this machine into a hardware TOML "
                             "(default: none, plan)")
    parser.add_argument("runs", nargs="*", help="run directories (with summary.json) for `calibrate` (default: none)")
    parser.add_argument("--model", help="preset (llama3-8b, gpt3-175b, ...) or layers=..,hidden=..,heads=..,... "
                        "(no default: a plan needs --model or --workload)")
    parser.add_argument("--workload", help="a stride workload to trace: bench workload name or run config TOML "
                        "(default: none)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for --workload (repeatable; default: none)")
    parser.add_argument("--hardware", default="h100-sxm",
                        help="device name from the catalog, or a part as a published row describes it, read the "
                        "way --from-csv reads its gpu column: 'H100 SXM 96GB @ 500 W' (default: %(default)s)")
    parser.add_argument("--hardware-file", help="extra/override hardware TOML on top of the shipped catalog "
                        "(default: none, only stride/perfmodel/hardware.toml)")
    parser.add_argument("--devices", type=int, help="number of devices, >= 1 (no default: a --model or --workload "
                        "plan needs it, --compare-hardware unless every NAME has its :COUNT)")
    parser.add_argument("--global-batch", type=int, help="sequences per step, >= 1 (default: about 4M tokens, a "
                        "multiple of --devices; --workload: the config's train.batch_size)")
    parser.add_argument("--seq", type=int, help="sequence length, >= 1 (default: the model's)")
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp8", "fp4"],
                        help="training precision (default: %(default)s)")
    parser.add_argument("--fp8-recipe", default="delayed",
                        help="fp8: delayed | current | tensorwise | rowwise | rowwise_gw_hp | mxfp8 (fp4: nvfp4) "
                             "(default: %(default)s)")
    parser.add_argument("--framework", default="megatron",
                        help="framework profile: megatron, megatron-legacy, deepspeed, ddp, fsdp1, fsdp2, torchtune, "
                             "maxtext (default: %(default)s)")
    parser.add_argument("--efficiency", help="calibration JSON with efficiency factors (default: the shipped "
                        "data/perfmodel/efficiency.json)")
    parser.add_argument("--top", type=int, default=8, help="rows of the ranked table, >= 1 (default: %(default)s)")
    parser.add_argument("--compare-hardware", nargs="?", const="all", metavar="NAME:COUNT,...",
                        help="rank device types by time/cost to --tokens: h100-sxm:64,h200:64 (bare: every "
                             "catalog device at --devices; default: off)")
    parser.add_argument("--tokens", type=float, default=1e12,
                        help="token budget for --compare-hardware, > 0 (default: %(default)g)")
    parser.add_argument("--sort", choices=["time", "cost"], default="time",
                        help="--compare-hardware ranking (default: %(default)s)")
    parser.add_argument("--list-hardware", action="store_true", help="print the hardware catalog (default: off)")
    parser.add_argument("--list-models", action="store_true", help="print the model presets (default: off)")
    parser.add_argument("--from-csv", help="predict every row of a published-results CSV (default: none)")
    parser.add_argument("--json", action="store_true", help="machine-readable output (default: off, tables)")
    parser.add_argument("--out", help="probe: write the hardware TOML here (default: none, printed only)")
    parser.add_argument("--threads", type=int, default=1, help="probe: intra-op threads, >= 1 (default: %(default)s)")
    parser.add_argument("--name", default="local-cpu", help="probe: catalog name of the entry (default: %(default)s)")
    parser.add_argument("--comm-profile", help="probe: a `stride comm --profile-out` TOML to reference "
                        "(default: none)")
    parser.set_defaults(func=run)


def _eff(args, catalog=None):
    from stride.perfmodel.efficiency import load_efficiency, shipped_efficiency

    if not args.efficiency:
        return shipped_efficiency()
    eff = load_efficiency(args.efficiency)
    _warn_other_hardware(args, catalog)
    return eff


def _warn_other_hardware(args, catalog) -> None:
    """Factors from `stride plan calibrate` hold for the part they were measured on: say so when a plan
    applies them to another part (a local-cpu calibration on an H100 plan went by without a word)."""
    import sys

    try:
        measured_on = json.loads(Path(args.efficiency).read_text()).get("hardware")
    except (OSError, ValueError, AttributeError):
        return
    if not measured_on:
        return
    target = args.hardware
    if catalog is not None:
        with contextlib.suppress(ConfigError):
            target = catalog.get(args.hardware).name  # an alias ("h100") names the calibrated part too
    targets = {target} if not (args.from_csv or args.compare_hardware) else set()
    if targets != {measured_on}:
        where = args.hardware if targets else "every row's own part"
        print(f"stride plan: warning: {args.efficiency} was calibrated on {measured_on}; applied to {where}, its "
              "factors are an assumption, not a measurement", file=sys.stderr)


def _device(catalog, text: str):
    """The part `--hardware` names: a catalog name or alias, or a description the way published rows write one
    (memory, bandwidth, a power cap, a TFLOP/s figure modify the catalog part; hw_text.resolve, the reader of
    --from-csv's gpu column). What the text changed is printed; text that cannot be read is an error naming it,
    never a silent catalog part ("B200 (power limited)" without the limit's value)."""
    import sys

    from stride.perfmodel.hw_text import resolve

    try:
        hw, notes = resolve(text, catalog)
    except ValueError as exc:
        if "not a part the catalog knows" in str(exc):  # a part it knows to be missing (B100) says so itself
            from stride.config.errors import suggest

            raise ConfigError(f"--hardware: unknown hardware `{text}`{suggest(text, catalog.names())}; known: "
                              f"{', '.join(catalog.names())}; add it with --hardware-file, or describe it "
                              "(e.g. '989 TFLOPS 80GB 3.35TB/s')") from None
        raise ConfigError(f"--hardware: {exc}") from None
    for note in notes:
        print(f"stride plan: note: --hardware {text!r}: {note}", file=sys.stderr)
    return hw


def _check_numbers(args: argparse.Namespace) -> None:
    """A number outside its range is an error naming the option: 0 is a value, not "not given" (`--global-batch 0`
    became the default batch, `--tokens -1` printed negative hours)."""
    for dest in ("devices", "global_batch", "seq", "top", "threads"):
        value = getattr(args, dest)
        if value is not None and value < 1:
            raise ConfigError(f"--{dest.replace('_', '-')} must be >= 1, got {value}")
    if args.tokens is not None and not (math.isfinite(args.tokens) and args.tokens > 0):
        raise ConfigError(f"--tokens must be a finite number > 0, got {args.tokens:g}")


def _interval(hw, args: argparse.Namespace) -> tuple[float, float, str]:
    """(lo, hi) multipliers of a predicted time on `hw` and which residuals they come from: the 80% interval of
    the run's kind, as `--from-csv` rows get it (stride/perfmodel/intervals.py)."""
    from stride.perfmodel.intervals import load_intervals, run_kind, time_factors

    q10, q90, basis = load_intervals().bounds(run_kind(hw.generation or hw.name, args.precision, args.framework))
    return (*time_factors(q10, q90), basis)


def _with_interval(pred: dict, lo: float, hi: float) -> dict:
    """A prediction's dict with the 80% interval of its step time and throughput (`_lo`/`_hi`)."""
    return {**pred, "step_time_s_lo": pred["step_time_s"] * lo, "step_time_s_hi": pred["step_time_s"] * hi,
            "tokens_per_s_per_device_lo": pred["tokens_per_s_per_device"] / hi,
            "tokens_per_s_per_device_hi": pred["tokens_per_s_per_device"] / lo}


def run(args: argparse.Namespace) -> int:
    from stride.perfmodel.hardware import load_catalog

    _check_numbers(args)
    if args.action == "calibrate":
        from stride.perfmodel.calibrate import calibrate_cli

        return calibrate_cli(args)
    if args.action == "probe":
        from stride.perfmodel.probe import probe_cli

        return probe_cli(args)
    catalog = load_catalog(args.hardware_file)
    if args.list_hardware or args.list_models:
        from stride.cli.plan_tables import print_hardware, print_models

        if args.list_hardware:
            print_hardware(catalog, args.json)
        if args.list_models:
            print_models(args.json)
        return 0
    eff = _eff(args, catalog)
    if args.from_csv:
        from stride.cli.plan_tables import print_rows
        from stride.perfmodel.predict_rows import predict_csv

        rows = predict_csv(args.from_csv, catalog, eff)
        if args.json:
            print(json.dumps(rows))
        else:
            print_rows(rows)
        return 0
    if args.workload:
        if args.devices is None:
            raise ConfigError("stride plan --workload needs --devices")
        return _plan_workload(args, _device(catalog, args.hardware), eff)
    from stride.perfmodel.frameworks import get_framework

    args.framework = get_framework(args.framework).name
    if not args.model or (args.devices is None and args.compare_hardware in (None, "all")):
        raise ConfigError("stride plan needs --model (or --workload) and --devices or --compare-hardware "
                          "NAME:COUNT,... "
                          "(or --from-csv FILE, --list-hardware, --list-models, or `calibrate RUNS...`)")
    from stride.perfmodel.model_spec import parse_model_spec
    from stride.perfmodel.planner import default_global_batch, distinct_alternatives, explain, search

    spec = parse_model_spec(args.model)
    if args.seq is not None:
        spec = spec.with_seq(args.seq)
    if args.compare_hardware:
        return _compare(args, spec, catalog, eff)
    gb = args.global_batch if args.global_batch is not None else default_global_batch(spec, args.devices)
    hw = _device(catalog, args.hardware)
    t0 = time.perf_counter()
    result = search(spec, hw, args.devices, gb, eff, args.precision, args.framework, args.fp8_recipe)
    seconds = time.perf_counter() - t0
    alts = distinct_alternatives(result)
    lo, hi, basis = _interval(hw, args)
    if args.json:
        best = result.best

        def out(p) -> dict:
            return _with_interval(p.to_dict(), lo, hi)

        print(json.dumps({
            "model": spec.name, "hardware": hw.name, "devices": args.devices, "global_batch": gb, "seq": spec.seq,
            "considered": result.considered, "fit": len(result.ranked), "search_seconds": seconds,
            "interval_basis": basis,
            "best": out(best) if best else None,
            "ranked": [out(p) for p in result.ranked[: args.top]],
            "alternatives": [{**out(p), "why_slower": explain(p, best)} for p in alts] if best else [],
            "fastest_not_fitting": [out(p) for p in result.rejected_memory[:3]],
        }))
        return 0
    _print_plan(result, alts, spec, hw, args.devices, gb, seconds, args.top, (lo, hi, basis))
    return 0 if result.best else 1


def _plan_workload(args, hw, eff) -> int:
    from stride.perfmodel.planner import explain
    from stride.perfmodel.workload_plan import describe, search_workload, settings

    t0 = time.perf_counter()
    plan = search_workload(args.workload, hw, args.devices, args.global_batch, eff, args.overrides)
    seconds = time.perf_counter() - t0
    res, best = plan.result, plan.result.best
    tr = next(iter(plan.traces.values()))
    if args.json:
        print(json.dumps({
            "workload": plan.name, "hardware": hw.name, "devices": args.devices, "global_batch": plan.global_batch,
            "considered": res.considered, "fit": len(res.ranked), "search_seconds": seconds,
            "trace": {mb: t.to_dict() for mb, t in plan.traces.items()},
            "best": {**best.to_dict(), "settings": settings(best.layout, plan.global_batch)} if best else None,
            "ranked": [{**p.to_dict(), "settings": settings(p.layout, plan.global_batch)}
                       for p in res.ranked[: args.top]],
            "fastest_not_fitting": [p.to_dict() for p in res.rejected_memory[:3]],
        }))
        return 0 if best else 1
    from rich.console import Console
    from rich.table import Table

    con = Console()
    con.print(f"[bold]{plan.name}[/] ({tr.param_count:,} parameters, {tr.precision}, traced at micro-batch "
              f"{', '.join(map(str, sorted(plan.traces)))}) on {args.devices} x {hw.display_name}, "
              f"global batch {plan.global_batch}: {res.considered} layouts, {len(res.ranked)} fit ({seconds:.2f} s)")
    lt = Table(title=f"per layer, one micro-batch of {tr.micro_batch}")
    for col in ("layer", "params", "fwd+bwd GFLOP", "MB moved", "kernels", "saved MB"):
        lt.add_column(col, justify="left" if col == "layer" else "right")
    for la in tr.layers:
        lt.add_row(la.name, f"{la.params:,}", f"{la.flops / 1e9:.3f}", f"{(la.fwd.bytes + la.bwd.bytes) / 1e6:.1f}",
                   str(la.fwd.kernels + la.bwd.kernels), f"{la.saved_bytes / 1e6:.2f}")
    con.print(lt)
    if not best:
        con.print("[red]no layout fits in memory[/]")
        return 1
    t = Table(title="fitting layouts, fastest first")
    for col in ("#", "layout", "step s", "samples/s/dev", "MFU", "mem GiB"):
        t.add_column(col, justify="left" if col == "layout" else "right")
    for i, p in enumerate(res.ranked[: args.top], 1):
        t.add_row(str(i), describe(p.layout), f"{p.step_time_s:.4f}",
                  f"{plan.global_batch / p.step_time_s / args.devices:,.1f}", f"{p.mfu * 100:.1f}%",
                  f"{p.peak_mem_gib:.3f}")
    con.print(t)
    terms = ", ".join(f"{k} {v:.4f}s" for k, v in best.breakdown_s.items() if v > 0)
    con.print(f"best: {describe(best.layout)}: {terms}")
    con.print(f"  run it with: {' '.join('--set ' + s for s in settings(best.layout, plan.global_batch))}")
    for p in res.ranked[1:4]:
        con.print(f"  {describe(p.layout)}: {explain(p, best)}")
    return 0


def _print_plan(result, alts, spec, hw, devices, gb, seconds, top, interval: tuple[float, float, str]) -> None:
    from rich.table import Table

    from stride.cli.plan_tables import _console
    from stride.perfmodel.planner import explain

    con = _console()
    con.print(f"[bold]{spec.name}[/] on {devices} x {hw.display_name}, global batch {gb} x {spec.seq} tokens: "
              f"{result.considered} layouts, {len(result.ranked)} fit ({seconds:.2f} s)")
    if not result.best:
        con.print("[red]no layout fits in memory[/]")
        for p in result.rejected_memory[:3]:
            con.print(f"  {p.layout.short()}: needs {p.peak_mem_gib:.1f} GiB of {hw.memory_gib:g}")
        return
    lo, hi, basis = interval
    t = Table(title="fitting layouts, fastest first (80% interval from held-out residuals of the same kind)")
    for col in ("#", "layout", "step s", "80% interval", "tok/s/dev", "80% interval ", "MFU", "mem GiB", "$/step"):
        t.add_column(col, justify="left" if col == "layout" else "right")
    for i, p in enumerate(result.ranked[:top], 1):
        t.add_row(str(i), p.layout.short(), f"{p.step_time_s:.3f}",
                  f"{p.step_time_s * lo:.3f} - {p.step_time_s * hi:.3f}", f"{p.tokens_per_s_per_device:,.0f}",
                  f"{p.tokens_per_s_per_device / hi:,.0f} - {p.tokens_per_s_per_device / lo:,.0f}",
                  f"{p.mfu * 100:.1f}%", f"{p.peak_mem_gib:.1f}", f"{p.cost_per_step_usd:.3f}")
    con.print(t)
    con.print(f"80% interval: {basis}")
    best = result.best
    b = Table(title=f"breakdown of the best: {best.layout.short()}")
    b.add_column("term")
    b.add_column("seconds", justify="right")
    b.add_column("share", justify="right")
    for k, v in sorted(best.breakdown_s.items(), key=lambda kv: -kv[1]):
        if v > 0:
            b.add_row(k, f"{v:.4f}", f"{v / best.step_time_s * 100:.1f}%")
    con.print(b)
    mem = ", ".join(f"{k} {v / 2**30:.1f}" for k, v in best.memory_bytes.items())
    con.print(f"memory per device (GiB): {mem}; total {best.peak_mem_gib:.1f} of {hw.memory_gib:g}")
    if alts:
        con.print("[bold]why the other shapes lose[/] (best layout of each other tp x pp):")
        for p in alts:
            con.print(f"  {p.layout.short()}: {explain(p, best)}")
    if result.rejected_memory:
        fastest = result.rejected_memory[0]
        if fastest.step_time_s < best.step_time_s:
            con.print(f"  faster but out of memory: {fastest.layout.short()} needs {fastest.peak_mem_gib:.1f} GiB")


def _compare(args, spec, catalog, eff) -> int:
    from stride.cli.plan_tables import print_compare
    from stride.perfmodel.planner import compare_hardware, parse_fleet

    if args.compare_hardware == "all":
        fleet = [(hw, args.devices) for hw in catalog.devices.values() if not hw.cpu]
    else:
        fleet = []
        for name, count in parse_fleet(args.compare_hardware, catalog.names()):
            if count is None and args.devices is None:
                raise ConfigError(f"--compare-hardware: `{name}` has no device count (name:count) "
                                  "and --devices is unset")
            fleet.append((catalog.get(name), count if count is not None else args.devices))
    t0 = time.perf_counter()
    rows = compare_hardware(spec, fleet, args.global_batch, eff, args.tokens, args.precision, args.sort, args.framework)
    parts = {hw.name: hw for hw, _ in fleet}
    for r in rows:
        if "reason" not in r:
            lo, hi, r["interval_basis"] = _interval(parts[r["hardware"]], args)
            r["hours_to_budget_lo"], r["hours_to_budget_hi"] = r["hours_to_budget"] * lo, r["hours_to_budget"] * hi
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"model": spec.name, "tokens": args.tokens, "sort": args.sort, "framework": args.framework,
                          "precision": args.precision, "search_seconds": seconds, "hardware": rows}))
    else:
        print_compare(rows, spec.name, args.tokens, args.sort, seconds)
    return 0 if any("reason" not in r for r in rows) else 1
