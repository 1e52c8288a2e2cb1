"""`stride report DIR [--prices FILE]`: report.html and summary.md from a bench results directory.

A `stride sweep` folder is refused in one line (exit status 2), nothing written: the sweep writes its own
report.html and summary.md there, which this command replaced with a bench-style table (audit 10, F5).
"""

from __future__ import annotations

import argparse


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="a results.json, a `stride bench` directory or a `stride train` run directory "
                   "(the report is written beside it; a `stride sweep` folder is refused: it has its own report)")
    p.add_argument("--prices", default=None, help="USD per device-hour table (TOML [prices]; default: the one "
                   "shipped with stride, stride/report/prices.toml)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from stride.bench.results import ResultsError
    from stride.report.recommend import load_prices
    from stride.report.render import render_report
    from stride.shown_text import plain

    def note(line: str) -> None:  # what the report left out (a loss curve): said here too, not only in the files
        print(f"stride report: note: {plain(line)}", file=sys.stderr)

    try:
        html, md = render_report(args.dir, load_prices(args.prices), note)
    except (ResultsError, FileNotFoundError, ValueError) as exc:  # the message may quote the input: `plain`
        print(f"stride report: {plain(exc)}", file=sys.stderr)
        return 2
    print(plain(f"wrote {html} and {md}"))
    return 0
