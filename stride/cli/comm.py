"""`stride comm`: collective benchmark in the manner of nccl-tests (algbw, busbw, correctness, alpha-beta)."""

from __future__ import annotations

import argparse
import json
import os
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
    parser.add_argument("--repeats", type=int, default=1,
                        help="time the --iters calls this many times per size and report the median (default 1, as "
                             "nccl-tests; 5 on a shared host whose load moves between sizes)")
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
    if not names:  # `--collectives ,` or `--collectives ''` was "unknown collective(s) []"
        return _fail(f"--collectives {args.collectives!r}: the list is empty; name at least one of: "
                     f"{', '.join(COLLECTIVES)}")
    unknown = [c for c in names if c not in COLLECTIVES]
    if unknown:
        hint = suggest(unknown[0].lower(), list(COLLECTIVES))
        return _fail(f"--collectives: unknown collective(s) {', '.join(unknown)}{hint}; "
                     f"known: {', '.join(COLLECTIVES)}")
    if args.profile_out:  # checked before minutes of measuring, not when writing the result
        out = Path(args.profile_out)
        if out.is_dir():
            return _fail(f"--profile-out {out}: is a directory; give a file path, e.g. {out / 'hw.toml'}")
        if not out.parent.is_dir():
            return _fail(f"--profile-out {out}: the directory {out.parent} does not exist")
    try:
        sizes = size_ladder(parse_bytes(args.min_bytes, "--min-bytes"), parse_bytes(args.max_bytes, "--max-bytes"),
                            args.factor)
    except ValueError as exc:
        return _fail(str(exc))
    if args.iters < 1 or args.warmup < 0 or args.repeats < 1:
        return _fail(f"--iters {args.iters} and --repeats {args.repeats} must be >= 1 and --warmup {args.warmup} >= 0")
    import torch

    from stride.comm.launch import CommJob, run_spawned, run_torchrun, under_torchrun

    backend = (args.backend or ("nccl" if torch.cuda.is_available() else "gloo")).lower()
    if backend == "nccl":
        return _fail("the nccl backend needs CUDA buffers; this version benchmarks CPU tensors: use --backend gloo")
    if msg := _backend_problem(backend):
        return _fail(msg)
    world = int(os.environ["WORLD_SIZE"]) if under_torchrun() else args.nproc
    if world < 2:  # before the sizes are split over the ranks: --nproc 0 divided by zero, a traceback
        where = f"torchrun started {world} rank" if under_torchrun() else f"--nproc {world}"
        return _fail(f"{where}: a collective benchmark needs at least 2 processes")
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world)) if under_torchrun() else args.nproc
    if msg := _size_problem(names, sizes, world) or _memory_problem(names, sizes[-1], world, local):
        return _fail(msg)
    if (msg := cores_warning(local)) and int(os.environ.get("LOCAL_RANK", "0")) == 0:
        print(f"stride comm: warning: {msg}", file=sys.stderr)
    job = CommJob(names, sizes, args.iters, args.warmup, backend, repeats=args.repeats)
    if under_torchrun():
        rows, rank, world = run_torchrun(job)
        if rank != 0:
            return 0 if all(r.correct for r in rows) else 1
    else:
        try:
            rows = run_spawned(job, args.nproc)
        except ValueError as exc:
            return _fail(str(exc))
    report = {"backend": backend, "world_size": world, "dtype": "float32", "rows": [r.to_dict() for r in rows]}
    no_profile = None
    if args.profile_out:
        from stride.comm.hwprofile import profile_tables, writable, write_profile

        tables = profile_tables(rows, backend, world)
        keep, left_out = writable(tables)
        report["profile"] = {"path": None, **{k: v for k, v in tables.items() if k.startswith("collectives.")},
                             "left_out": left_out}
        if len(keep) > 1:  # meta and at least one collective
            from stride.perfmodel.hardware import read_comm_profile

            path = write_profile(args.profile_out, tables, lambda tmp: read_comm_profile(tmp, "stride comm"))
            report["profile"]["path"] = str(path)
        else:
            why = "; ".join(f"{k}: {v}" for k, v in left_out.items()) or "no collective had 2 correct sizes"
            no_profile = (f"--profile-out {args.profile_out}: not written: no collective's bandwidth was resolved "
                          f"({why}); {_MORE}")
    if args.json:
        print(json.dumps(report))
    else:
        _table(report)
    bad = [r for r in rows if not r.correct]
    for r in bad:
        print(f"stride comm: WRONG RESULT {r.collective} {r.bytes} B: {r.error}", file=sys.stderr)
    if no_profile:
        _fail(no_profile)
    return 1 if bad else 2 if no_profile else 0


_MORE = "measure larger messages (--max-bytes) or more --iters"


def _backend_problem(backend: str) -> str | None:
    """A backend this torch lacks fails deep in init_process_group with a traceback; say so up front."""
    import torch.distributed as dist

    if backend not in ("undefined", "fake") and dist.is_backend_available(backend):
        return None
    here = [b for b in dist.Backend.backend_list if b not in ("undefined", "fake") and dist.is_backend_available(b)]
    return f"--backend {backend}: not available in this torch build; available here: {', '.join(here) or 'none'}"


def _size_problem(names: list[str], sizes: list[int], world: int) -> str | None:
    """Sizes below a collective's smallest (one float32; one per rank where it splits the buffer over the ranks)
    are skipped by the benchmark: an error when that leaves a collective with none (a table without rows said
    nothing), else a note naming the skipped sizes."""
    from stride.comm.collectives import COLLECTIVES, ELEM

    empty, skipped = [], {}
    for name in names:
        least = COLLECTIVES[name].min_bytes(world)
        small = [s for s in sizes if s < least]
        if len(small) == len(sizes):
            empty.append(f"{name} {least} B")
        elif small:
            skipped.setdefault((least, tuple(small)), []).append(name)
    if empty:
        span = f"{sizes[0]}-{sizes[-1]}" if len(sizes) > 1 else f"{sizes[0]}"
        return (f"every size ({span} B) is below the smallest the collective needs (one float32; one per rank "
                f"at {world} ranks where it splits the buffer): {', '.join(empty)}; use --max-bytes (and "
                "--min-bytes) at least that")
    for (least, small), which in skipped.items():
        why = f"one float32 per rank at {world} ranks" if least > ELEM else "one float32"
        print(f"stride comm: note: {', '.join(map(str, small))} B skipped for {', '.join(which)} "
              f"(below {least} B, {why})", file=sys.stderr)
    return None


def _memory_problem(names: list[str], max_bytes: int, world: int, local: int) -> str | None:
    """Refuse a --max-bytes this host cannot hold (16G would allocate several 16 GiB buffers per rank)."""
    from stride.comm.collectives import peak_bytes
    from stride.files.host import available_memory_bytes, binary_size

    need = local * max(peak_bytes(n, max_bytes, world) for n in names)
    have = available_memory_bytes()
    if need <= have:
        return None
    return (f"--max-bytes: the largest size, {binary_size(max_bytes)}: about {binary_size(need)} needed ({local} "
            f"ranks here, buffers and result check of the largest size), {binary_size(have)} available; "
            "lower --max-bytes")


def cores_warning(local: int) -> str | None:
    """Why `local` ranks on this host will oversubscribe its usable cores (each rank runs one intra-op thread, plus
    gloo's own), or None. `--nproc 64` on 2 cores printed nothing for a minute, then timings of the scheduler."""
    from stride.files.rank_share import usable_cores

    cores = usable_cores()
    if local <= cores:
        return None
    return (f"{local} processes on the {cores} usable cores of this host (os.sched_getaffinity) will oversubscribe "
            "them: the timings will mostly measure the scheduler, not the collectives; "
            + (f"use --nproc {cores} or fewer" if cores >= 2 else "on one core any two ranks take turns on it"))


def fit_line(name: str, fit: dict) -> str:
    """One collective's alpha-beta line. A beta held at 0 (time did not grow with size) is no bandwidth to
    quote: it printed as "bandwidth 0.000 GB/s", a link that moves nothing; such a fit is left out of the file."""
    from stride.comm.hwprofile import unresolved

    if why := unresolved(fit):
        return f"{name}: alpha {fit['alpha_us']:.1f} us, {why}, r2 {fit['fit_r2']:.3f}"
    bw = f"bandwidth {fit['algbw_GBps']:.3f} GB/s (busbw {fit['busbw_GBps']:.3f})"
    return f"{name}: alpha {fit['alpha_us']:.1f} us, {bw}, r2 {fit['fit_r2']:.3f}"


def _table(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from stride.shown_text import literal

    # no input file here (stride comm measures, reads nothing), but a path the user gave (`--out runs/[x]`) is text
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
            con.print(literal(fit_line(key[12:], fit)), soft_wrap=True)
    prof = report.get("profile")
    if prof and prof["left_out"]:
        con.print(literal(f"left out of the profile: {', '.join(prof['left_out'])} (bandwidth not resolved); {_MORE}"),
                  soft_wrap=True)
    if prof and prof["path"]:
        con.print(literal(f"hardware profile written to {prof['path']}"))
