"""`stride compare A B`: per-workload ratios, judged against run noise (A, B: results.json, bench or run dirs)."""

from __future__ import annotations

import argparse


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="baseline: a results.json, a `stride bench` directory or a `stride train` run directory")
    p.add_argument("b", help="candidate: the same kinds as A")
    p.add_argument("--json", action="store_true",
                   help="print only the comparison rows as JSON (nothing else; default: a table)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from rich.console import Console

    from stride.bench.results import ResultsError
    from stride.files import strict_json
    from stride.report.compare import compare_results, compare_table, mismatch_message
    from stride.report.inputs import resolve

    try:
        (a, _), (b, _) = resolve(args.a), resolve(args.b)
        rows = compare_results(a, b)
    except ResultsError as exc:
        print(f"stride compare: {exc}", file=sys.stderr)
        return 2
    for side, res in (("A", a), ("B", b)):
        if res.get("partial"):
            print(f"stride compare: {side} is a stopped sweep: {res['partial']['done']} of "
                  f"{res['partial']['planned']} runs measured", file=sys.stderr)
    refused = mismatch_message(rows)  # a ratio of two different workloads is no verdict on a change
    if refused and len(rows) == 1:  # nothing else to show: the refusal alone
        print(f"stride compare: A = {args.a}, B = {args.b}: {refused}", file=sys.stderr)
        return 2
    if args.json:
        print(strict_json.dumps(rows))
    else:
        Console(width=140).print(compare_table(rows, args.a, args.b))
    if refused:  # the other rows have their verdicts; these had none
        print(f"stride compare: A = {args.a}, B = {args.b}: {refused}", file=sys.stderr)
        return 2
    return 0
