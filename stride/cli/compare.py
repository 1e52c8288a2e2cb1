"""`stride compare A/results.json B/results.json`: per-workload ratios, judged against run noise."""

from __future__ import annotations

import argparse


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="baseline results.json")
    p.add_argument("b", help="candidate results.json")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from rich.console import Console
    from rich.table import Table

    from stride.bench.results import ResultsError, load_results
    from stride.report.compare import compare_results

    try:
        rows = compare_results(load_results(args.a), load_results(args.b))
    except ResultsError as exc:
        print(f"stride compare: {exc}", file=sys.stderr)
        return 2
    table = Table(title="stride compare: B / A")
    for col in ("workload", "A median", "B median", "B/A throughput", "noise band", "B/A memory", "verdict"):
        table.add_column(col, justify="left" if col in ("workload", "verdict") else "right")
    for r in rows:
        table.add_row(r["name"], f"{r.get('a_median') or 0:,.0f}", f"{r.get('b_median') or 0:,.0f}",
                      f"{r['ratio']:.3f}" if r["ratio"] else "-",
                      f"±{100 * r['noise_band']:.1f}%" if r.get("noise_band") else "-",
                      f"{r['mem_ratio']:.3f}" if r.get("mem_ratio") else "-", r["verdict"])
    Console(width=140).print(table)
    if args.json:
        print(json.dumps(rows))
    return 0
