"""`stride plan`: predict step time, memory and cost; recommend a layout and hardware.

  stride plan --model llama3-8b --hardware h100 --devices 64 [--global-batch B] [--seq S] [--json]
  stride plan --model llama3-70b --devices 512 --compare-hardware [--tokens 1e12]
  stride plan --from-csv ../shared/perfmodel/published_dev.csv --json
"""

from __future__ import annotations

import argparse
import json
import time

from stride.config.errors import ConfigError


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=["calibrate"], help="calibrate: fit factors from runs")
    parser.add_argument("runs", nargs="*", help="run directories (with summary.json) for `calibrate`")
    parser.add_argument("--model", help="preset (llama3-8b, gpt3-175b, ...) or layers=..,hidden=..,heads=..,...")
    parser.add_argument("--hardware", default="h100-sxm", help="device name from the catalog (default h100-sxm)")
    parser.add_argument("--hardware-file", help="extra/override hardware TOML on top of configs/hardware.toml")
    parser.add_argument("--devices", type=int, help="number of devices")
    parser.add_argument("--global-batch", type=int, help="sequences per step (default: ~4M tokens)")
    parser.add_argument("--seq", type=int, help="sequence length (overrides the model's)")
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp8"])
    parser.add_argument("--efficiency", help="calibration JSON with efficiency factors")
    parser.add_argument("--top", type=int, default=8, help="rows of the ranked table")
    parser.add_argument("--compare-hardware", action="store_true", help="rank every catalog device")
    parser.add_argument("--tokens", type=float, default=1e12, help="token budget for --compare-hardware")
    parser.add_argument("--from-csv", help="predict every row of a published-results CSV")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def _eff(args):
    from stride.perfmodel.efficiency import Efficiency, load_efficiency

    return load_efficiency(args.efficiency) if args.efficiency else Efficiency()


def run(args: argparse.Namespace) -> int:
    from stride.perfmodel.hardware import load_catalog

    if args.action == "calibrate":
        from stride.perfmodel.calibrate import calibrate_cli

        return calibrate_cli(args)
    catalog = load_catalog(args.hardware_file)
    eff = _eff(args)
    if args.from_csv:
        from stride.perfmodel.predict_rows import predict_csv

        rows = predict_csv(args.from_csv, catalog, eff)
        if args.json:
            print(json.dumps(rows))
        else:
            for r in rows:
                if r.get("reason"):
                    print(f"{r['row_id']:12s} not modelled: {r['reason']}")
                else:
                    print(f"{r['row_id']:12s} {r['tokens_per_s_per_gpu']:10.1f} tok/s/gpu"
                          f"  iter {r['iter_time_s']:8.3f}s  mfu {r['mfu'] * 100:5.1f}%"
                          f"  mem {r['peak_mem_gib']:6.1f} GiB  fits {r['fits']}")
        return 0
    if not args.model or not args.devices:
        raise ConfigError("stride plan needs --model and --devices (or --from-csv FILE, or `calibrate RUNS...`)")
    from stride.perfmodel.model_spec import parse_model_spec
    from stride.perfmodel.planner import compare_hardware, default_global_batch, distinct_alternatives, explain, search

    spec = parse_model_spec(args.model)
    if args.seq:
        spec = spec.with_seq(args.seq)
    gb = args.global_batch or default_global_batch(spec, args.devices)
    if args.compare_hardware:
        rows = compare_hardware(spec, list(catalog.devices.values()), args.devices, gb, eff, args.tokens,
                                args.precision)
        if args.json:
            print(json.dumps({"model": spec.name, "devices": args.devices, "global_batch": gb, "tokens": args.tokens,
                              "hardware": rows}))
        else:
            _print_compare(rows, spec.name, args.devices, gb, args.tokens)
        return 0
    hw = catalog.get(args.hardware)
    t0 = time.perf_counter()
    result = search(spec, hw, args.devices, gb, eff, args.precision)
    seconds = time.perf_counter() - t0
    alts = distinct_alternatives(result)
    if args.json:
        best = result.best
        print(json.dumps({
            "model": spec.name, "hardware": hw.name, "devices": args.devices, "global_batch": gb, "seq": spec.seq,
            "considered": result.considered, "fit": len(result.ranked), "search_seconds": seconds,
            "best": best.to_dict() if best else None,
            "ranked": [p.to_dict() for p in result.ranked[: args.top]],
            "alternatives": [{**p.to_dict(), "why_slower": explain(p, best)} for p in alts] if best else [],
            "fastest_not_fitting": [p.to_dict() for p in result.rejected_memory[:3]],
        }))
        return 0
    _print_plan(result, alts, spec, hw, args.devices, gb, seconds, args.top)
    return 0 if result.best else 1


def _print_plan(result, alts, spec, hw, devices, gb, seconds, top) -> None:
    from rich.console import Console
    from rich.table import Table

    from stride.perfmodel.planner import explain

    con = Console()
    con.print(f"[bold]{spec.name}[/] on {devices} x {hw.display_name}, global batch {gb} x {spec.seq} tokens: "
              f"{result.considered} layouts, {len(result.ranked)} fit ({seconds:.2f} s)")
    if not result.best:
        con.print("[red]no layout fits in memory[/]")
        for p in result.rejected_memory[:3]:
            con.print(f"  {p.layout.short()}: needs {p.peak_mem_gib:.1f} GiB of {hw.memory_gib:g}")
        return
    t = Table(title="fitting layouts, fastest first")
    for col in ("#", "layout", "step s", "tok/s/dev", "MFU", "mem GiB", "$/step"):
        t.add_column(col, justify="left" if col == "layout" else "right")
    for i, p in enumerate(result.ranked[:top], 1):
        t.add_row(str(i), p.layout.short(), f"{p.step_time_s:.3f}", f"{p.tokens_per_s_per_device:,.0f}",
                  f"{p.mfu * 100:.1f}%", f"{p.peak_mem_gib:.1f}", f"{p.cost_per_step_usd:.3f}")
    con.print(t)
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


def _print_compare(rows, name, devices, gb, tokens) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{name} on {devices} devices, batch {gb}: time and cost to {tokens:.3g} tokens")
    for col in ("hardware", "best layout", "tok/s/dev", "MFU", "days", "cost $"):
        t.add_column(col, justify="left" if col in ("hardware", "best layout") else "right")
    for r in rows:
        if "reason" in r:
            t.add_row(r["hardware"], f"[dim]{r['reason']}[/]", "", "", "", "")
        else:
            t.add_row(r["hardware"], r["layout"], f"{r['tokens_per_s_per_device']:,.0f}", f"{r['mfu'] * 100:.1f}%",
                      f"{r['days_to_budget']:.1f}", f"{r['cost_to_budget_usd']:,.0f}")
    Console().print(t)

