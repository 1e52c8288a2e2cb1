"""`stride compare A B`: per-workload ratios, judged against each side's measured spread (A, B: results.json, bench or
run dirs)."""

from __future__ import annotations

import argparse

DESCRIPTION = (
    "Compare two results (results.json, bench or run folders) workload by workload: B/A of the median throughput, "
    "judged against a noise band of 2 x sqrt(cv_A^2 + cv_B^2), at least 2 %, where each cv is the spread of that "
    "side's measurements: a `stride bench` entry's 3 throughput windows inside one run, a world sweep point's "
    "repeated runs. Within-run spread can understate what a second run differs by: repeat runs to see that. "
    "A `stride train` run folder's cv is the robust spread of the timed steps its metrics.jsonl logged; where that "
    "file gives none, it is one figure, and against another such the band is the 2 % floor, 'assumed'. "
    "Verdict: 'within noise' where |B/A - 1| <= band, else faster or slower; the table shows more digits where "
    "rounding would hide which side of the band the ratio is on. A side whose run says its host was contended (its "
    "threads waited for cores: `contention_note` in summary.json or results.json) gets no verdict: 'no verdict: the "
    "host was busy', with the run's note under the table; rerun on a quiet host.")
EPILOG = ("exit status: 0 compared; 2 for an unreadable or impossible input, or any row refused (different "
          "workloads, workload versions or throughput units), after the table where other rows were compared")


def register(p: argparse.ArgumentParser) -> None:
    p.description, p.epilog = DESCRIPTION, EPILOG  # main's one line is the command list's summary
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
    from stride.report.compare import compare_results, compare_table, mismatch_message, statistic
    from stride.report.inputs import resolve
    from stride.shown_text import plain

    # every line here can quote the inputs (names, config values): `plain`, so nothing in them acts on the terminal
    try:
        (a, _), (b, _) = resolve(args.a), resolve(args.b)
    except ResultsError as exc:
        print(f"stride compare: {plain(exc)}", file=sys.stderr)
        return 2
    try:
        rows = compare_results(a, b)
    except ResultsError as exc:  # a figure of the pair, not of one file (a ratio that is no number): both named
        print(plain(f"stride compare: A = {args.a}, B = {args.b}: {exc}"), file=sys.stderr)
        return 2
    for side, res in (("A", a), ("B", b)):
        if res.get("partial"):
            print(f"stride compare: {side} is a stopped sweep: {res['partial']['done']} of "
                  f"{res['partial']['planned']} runs measured", file=sys.stderr)
    refused = mismatch_message(rows)  # a ratio of two different workloads is no verdict on a change
    if refused and len(rows) == 1:  # nothing else to show: the refusal alone
        print(plain(f"stride compare: A = {args.a}, B = {args.b}: {refused}"), file=sys.stderr)
        return 2
    if args.json:
        print(strict_json.dumps(rows))
    else:
        Console(width=140).print(compare_table(rows, args.a, args.b, statistic(a), statistic(b)))
    if refused:  # the other rows have their verdicts; these had none
        print(plain(f"stride compare: A = {args.a}, B = {args.b}: {refused}"), file=sys.stderr)
        return 2
    return 0
