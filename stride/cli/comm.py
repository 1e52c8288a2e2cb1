"""`stride comm`: collective benchmark in the manner of nccl-tests (algbw, busbw, correctness, alpha-beta)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from stride.comm.collectives import COLLECTIVES
from stride.comm.sizes import parse_bytes, size_ladder


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nproc", type=int, default=2,
                        help="local processes to spawn (ignored under torchrun; default: %(default)s)")
    parser.add_argument("--collectives", default=",".join(COLLECTIVES),
                        help=f"comma-separated subset of: {', '.join(COLLECTIVES)} (default: all)")
    parser.add_argument("--min-bytes", default="8", help="smallest message, e.g. 8, 1K (default 8)")
    parser.add_argument("--max-bytes", default="16M", help="largest message, e.g. 64M, 1G (default 16M)")
    parser.add_argument("--factor", type=int, default=2, help="size multiplier between steps (default 2)")
    parser.add_argument("--iters", type=int, default=20, help="timed iterations per size (default 20)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up iterations per size (default 5)")
    parser.add_argument("--backend", default=None,
                        help="torch.distributed backend (default: nccl with CUDA, else gloo)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--profile-out", metavar="FILE", help="write the alpha-beta hardware profile (TOML) here")
    parser.set_defaults(func=run)


def _fail(msg: str) -> int:
    print(f"stride comm: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from stride.config.errors import suggest

    names = [c.strip() for c in args.collectives.split(",") if c.strip()]
    unknown = [c for c in names if c not in COLLECTIVES]
    if unknown or not names:
        hint = suggest(unknown[0].lower(), list(COLLECTIVES)) if unknown else ""
        return _fail(f"--collectives: unknown collective(s) {unknown or names}{hint}; known: {', '.join(COLLECTIVES)}")
    if args.profile_out:  # checked before minutes of measuring, not when writing the result
        out = Path(args.profile_out)
        if out.is_dir():
            return _fail(f"--profile-out {out}: is a directory; give a file path, e.g. {out / 'hw.toml'}")
        if not out.parent.is_dir():
            return _fail(f"--profile-out {out}: the directory {out.parent} does not exist")
    try:
        sizes = size_ladder(parse_bytes(args.min_bytes), parse_bytes(args.max_bytes), args.factor)
    except ValueError as exc:
        return _fail(str(exc))
    if args.iters < 1 or args.warmup < 0:
        return _fail(f"--iters {args.iters} must be >= 1 and --warmup {args.warmup} >= 0")
    import torch

    from stride.comm.launch import CommJob, run_spawned, run_torchrun, under_torchrun

    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        return _fail("the nccl backend needs CUDA buffers; this version benchmarks CPU tensors: use --backend gloo")
    job = CommJob(names, sizes, args.iters, args.warmup, backend)
    if under_torchrun():
        rows, rank, world = run_torchrun(job)
        if rank != 0:
            return 0 if all(r.correct for r in rows) else 1
    else:
        try:
            rows = run_spawned(job, args.nproc)
        except ValueError as exc:
            return _fail(str(exc))
        world = args.nproc
    report = {"backend": backend, "world_size": world, "dtype": "float32", "rows": [r.to_dict() for r in rows]}
    if args.profile_out:
        from stride.comm.hwprofile import profile_tables, write_profile

        path = write_profile(args.profile_out, rows, backend, world)
        report["profile"] = {"path": str(path), **{k: v for k, v in profile_tables(rows, backend, world).items()
                                                   if k.startswith("collectives.")}}
    if args.json:
        print(json.dumps(report))
    else:
        _table(report)
    bad = [r for r in rows if not r.correct]
    for r in bad:
        print(f"stride comm: WRONG RESULT {r.collective} {r.bytes} B: {r.error}", file=sys.stderr)
    return 1 if bad else 0


def fit_line(name: str, fit: dict) -> str:
    """One collective's alpha-beta line. A beta held at 0 (time did not grow with size) is no bandwidth to
    quote: the profile stores 0.0 there, which printed as "bandwidth 0.000 GB/s", a link that moves nothing."""
    if fit["beta_us_per_byte"] > 0:
        bw = f"bandwidth {fit['algbw_GBps']:.3f} GB/s (busbw {fit['busbw_GBps']:.3f})"
    else:
        sizes = fit.get("sizes_bytes") or [0]
        bw = f"bandwidth not resolved (time did not grow with size, {min(sizes):,}-{max(sizes):,} B)"
    return f"{name}: alpha {fit['alpha_us']:.1f} us, {bw}, r2 {fit['fit_r2']:.3f}"


def _table(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"stride comm: {report['backend']}, {report['world_size']} ranks, float32 "
                    "(time: slowest rank's mean)")
    for col in ("collective", "bytes", "count", "time us", "algbw GB/s", "busbw GB/s", "check"):
        t.add_column(col, justify="left" if col == "collective" else "right")
    for r in report["rows"]:
        t.add_row(r["collective"], str(r["bytes"]), str(r["count"]), f"{r['time_us']:.1f}", f"{r['algbw_GBps']:.3f}",
                  f"{r['busbw_GBps']:.3f}", "ok" if r["correct"] else "WRONG")
    con = Console()
    con.print(t)
    for key, fit in report.get("profile", {}).items():
        if key.startswith("collectives."):
            con.print(fit_line(key[12:], fit), highlight=False, soft_wrap=True)
    if "profile" in report:
        con.print(f"hardware profile written to {report['profile']['path']}")
