"""`stride analyze TRACE_OR_DIR [--json] [--hta-compatible]`: where a step's time goes, from profiler traces."""

from __future__ import annotations

import argparse
import sys

from stride.files import strict_json
from stride.metrics.dtype_speed import speeds_of_trace
from stride.profile.analyze import analyze_traces
from stride.profile.errors import TraceError


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="TRACE_OR_DIR",
                        help="Kineto/Chrome trace files (.json, .json.gz) or directories of them, one per rank")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables (default: tables)")
    parser.add_argument("--hta-compatible", action="store_true",
                        help="temporal breakdown, overlap and idle split with Holistic Trace Analysis' definitions "
                        "(default: stride's own, docs/analyze.md)")
    parser.add_argument("--include-last-step", action="store_true",
                        help="with --hta-compatible: keep the last profiler step (default: dropped, as HTA does)")
    parser.add_argument("--top", type=int, default=10, help="kernels/operators listed per rank (default 10)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.top < 1:
        print("stride analyze: --top must be >= 1", file=sys.stderr)
        return 2
    try:
        report = analyze_traces(args.paths, hta_compatible=args.hta_compatible,
                                include_last_step=args.include_last_step, top_k=args.top,
                                dtype_speeds=lambda t: speeds_of_trace(t.has_device, t.meta.get("host_name")))
    except TraceError as exc:  # a trace the user gave that cannot be read or analysed: bad input
        from stride.shown_text import plain

        print(f"stride analyze: {plain(exc)}", file=sys.stderr)  # it may quote the trace: nothing acts on the terminal
        return 2
    if args.json:
        print(strict_json.dumps(report, default=float))
        return 0
    from stride.profile.render import render_report

    render_report(report)
    return 0
