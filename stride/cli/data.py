"""`stride data synth|ingest|inspect|probe`: make a market dataset, turn files into a store, look at a store,
measure the loader's settings on this host."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def register(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND", required=True)
    s = sub.add_parser("synth", help="simulate a market: Parquet partitioned by date and symbol")
    s.add_argument("--out", required=True, help="output directory")
    s.add_argument("--assets", type=int, default=64, help="symbols to simulate, >= 1 (default: %(default)s)")
    s.add_argument("--days", type=int, default=250, help="trading days (weekdays), >= 1 (default: %(default)s)")
    s.add_argument("--freq", default="1min",
                   help="bar length: 1min, 5min, 30s, 30min (must divide 6.5 h; default: %(default)s)")
    s.add_argument("--levels", type=int, default=5,
                   help="order-book levels per side, >= 0; 0 writes bars only (default: %(default)s)")
    s.add_argument("--seed", type=int, default=0,
                   help="random seed, >= 0; the same seed writes the same data (default: %(default)s)")
    s.add_argument("--overwrite", action="store_true",
                   help="replace an earlier synth output at --out (nothing else; default: refuse it)")
    s.set_defaults(func=run_synth)

    i = sub.add_parser("ingest", help="ingest Parquet / Arrow IPC / CSV / NumPy files into a memory-mapped store")
    i.add_argument("src", help="a file, or a directory searched recursively")
    i.add_argument("--out", required=True, help="store directory (created by an atomic rename)")
    i.add_argument("--time-col", default="timestamp", help="the timestamp column (default: %(default)s)")
    i.add_argument("--time-format", default=None, help="strptime format for string timestamps, e.g. %%m/%%d/%%Y")
    i.add_argument("--time-unit", default="auto", choices=["auto", "s", "ms", "us", "ns"],
                   help="unit of integer timestamps: auto reads it from their magnitude (dates 1990-2100) "
                        "(default: %(default)s)")
    i.add_argument("--symbol-col", default="symbol",
                   help="the symbol column (default: %(default)s); absent in the files: one symbol per file "
                        "(its name)")
    i.add_argument("--columns", default=None, help="comma-separated feature columns (default: every other column)")
    i.add_argument("--fill-policy", default="error", choices=["error", "ffill", "zero"],
                   help="what to do with NaN/inf/missing values (default: stop with an error)")
    i.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="how the store keeps feature values; bfloat16 halves the bytes (default: %(default)s)")
    i.add_argument("--overwrite", action="store_true",
                   help="replace an existing store at --out (default: refuse it)")
    i.set_defaults(func=run_ingest)

    n = sub.add_parser("inspect", help="print a store's manifest summary (and verify checksums)")
    n.add_argument("store", help="a store directory (what `stride data ingest` writes)")
    n.add_argument("--verify", action="store_true",
                   help="recompute every checksum, the derived feature caches' too (reads every byte)")
    n.add_argument("--json", action="store_true",
                   help="print the manifest (without the per-symbol rows) as one JSON line (default: a table)")
    n.set_defaults(func=run_inspect)

    pr = sub.add_parser("probe", help="measure the loader's copy, gather threads and prefetch on this host (cached)")
    pr.add_argument("config", nargs="?", default=None, help="a run config (default: the built-in defaults)")
    pr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    pr.add_argument("--device", default=None, help="the device the run trains on (default: the config's)")
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(func=run_probe)


# `data synth`'s numeric options and their least values: checked here, where the message can name the option
# (the simulator's own errors, e.g. numpy's "negative dimensions are not allowed" for --levels -1, cannot).
SYNTH_MINIMA = {"assets": 1, "days": 1, "levels": 0, "seed": 0}


def synth_input_error(args: argparse.Namespace) -> str | None:
    """What is wrong with `data synth`'s options (naming the option and its allowed range), or None."""
    for name, low in SYNTH_MINIMA.items():
        value = getattr(args, name)
        if value < low:
            return f"--{name} {value}: must be >= {low}"
    from stride.errors import file_in_path

    out = Path(args.out)
    blocker = file_in_path(out)
    if blocker is not None:  # bad input (exit 2), not a state of the machine: say which path is in the way
        return f"--out {out}: {blocker} is a file, not a directory; give a directory path"
    return None


def _stamp(path: Path) -> tuple[int, int] | None:
    """(inode, mtime) of the file that completes an output (a store's manifest, synth's marker), None: none there.
    Changed by a command stopped with Ctrl-C: the output was written whole, only the clean-up after was cut."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _interrupted(cmd: str, out: str, marker: str, before: tuple[int, int] | None, whole: str, earlier: str,
                 redo: str) -> int:
    """One line for Ctrl-C in ingest or synth, status 130: written whole where the file that completes the output
    (`marker`) is new since the start (the stop came in the clean-up after), else nothing written."""
    from stride.errors import one_line

    if _stamp(Path(out) / marker) not in (before, None):
        print(f"stride data {cmd}: stopped (interrupted) after {whole}", file=sys.stderr)
        return 130
    kept = f" (the earlier {earlier} there is kept)" if Path(out).exists() else ""
    print(f"stride data {cmd}: stopped (interrupted): nothing written to {one_line(out)}{kept}; rerun to {redo}",
          file=sys.stderr)
    return 130


class SynthProgress:
    """A bar of the files synth has written (day, files, time left) on a terminal; nothing elsewhere, where the
    one summary line is the output. A long synth wrote nothing for minutes (a day of 1s bars takes seconds).
    Redrawn from the writing loop at most every `refresh_s` (no refresh thread), as TrainProgress does."""

    def __init__(self, n_assets: int, console: Any = None, refresh_s: float = 0.5) -> None:
        from rich.console import Console

        self.console = console if console is not None else Console(stderr=True)
        self.n_assets, self.refresh_s = max(n_assets, 1), refresh_s
        self._bar: Any = None
        self._next = 0.0

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            if not self.console.is_terminal:
                return
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("files"), TimeRemainingColumn(), console=self.console,
                                 auto_refresh=False, transient=True)
            self._task = self._bar.add_task("synth", total=total)
            self._bar.start()
        now = time.perf_counter()
        if now >= self._next or done >= total:
            self._next = now + self.refresh_s
            day = min(done // self.n_assets + 1, -(-total // self.n_assets))
            self._bar.update(self._task, completed=done, description=f"synth day {day}", refresh=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def run_synth(args: argparse.Namespace) -> int:
    from stride.data.simulator import synthesize
    from stride.errors import one_line

    problem = synth_input_error(args)
    if problem is not None:
        print(f"stride data synth: {one_line(problem)}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    before = _stamp(Path(args.out) / "_stride_synth.json")
    progress = SynthProgress(args.assets)
    try:
        info = synthesize(args.out, args.assets, args.days, args.freq, args.seed, args.levels, args.overwrite,
                          progress=progress)
    except (ValueError, FileExistsError) as exc:
        progress.close()
        print(f"stride data synth: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        progress.close()
        return _interrupted("synth", args.out, "_stride_synth.json", before,
                            f"{one_line(args.out)} was written whole (its _stride_synth.json is new)", "output",
                            "write it")
    finally:
        progress.close()
    print(f"wrote {info['files']} files, {info['rows']:,} rows ({info['assets']} assets x {info['days']} days x "
          f"{info['bars_per_day']} bars) to {args.out} in {time.perf_counter() - t0:.1f} s")
    return 0


def run_ingest(args: argparse.Namespace) -> int:
    from stride.data.ingest import IngestError, ingest
    from stride.data.store import StoreError, open_store

    cols = [c.strip() for c in args.columns.split(",")] if args.columns else None
    t0 = time.perf_counter()
    before = _stamp(Path(args.out) / "manifest.json")
    try:
        out = ingest(args.src, args.out, time_col=args.time_col, time_format=args.time_format,
                     symbol_col=args.symbol_col, columns=cols, fill_policy=args.fill_policy, dtype=args.dtype,
                     overwrite=args.overwrite, time_unit=args.time_unit)
    except (IngestError, StoreError) as exc:
        from stride.errors import one_line

        print(f"stride data ingest: {one_line(str(exc))}", file=sys.stderr)  # a file name may hold a newline
        return 2
    except KeyboardInterrupt:  # the temporary store folder is removed by now (StoreWriter.abort)
        from stride.errors import one_line

        return _interrupted("ingest", args.out, "manifest.json", before,
                            f"the store {one_line(args.out)} was written whole (check: stride data inspect "
                            f"{one_line(args.out)} --verify)", "store", "ingest")
    try:  # the store was checked as open_store reads it before it was committed; it may have been changed since
        m = open_store(out).manifest
    except StoreError as exc:
        from stride.errors import one_line

        print(f"stride data ingest: {one_line(str(exc))}", file=sys.stderr)
        return 2
    print(f"store {out}: {m['n_rows']:,} rows x {len(m['columns'])} columns ({m['dtype']}), "
          f"{len(m['symbols'])} symbols, {m['time_range'][0]} .. {m['time_range'][1]}, "
          f"{time.perf_counter() - t0:.1f} s")
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    from stride.data.store import StoreError, open_store

    try:
        st = open_store(args.store, verify=args.verify)
        if args.verify:  # the derived feature caches too: every byte against its record (normalize.verify_derived)
            from stride.data.normalize import verify_derived

            args.derived_verified = verify_derived(st.path)
    except StoreError as exc:
        from stride.errors import one_line

        print(f"stride data inspect: {one_line(str(exc))}", file=sys.stderr)
        return 2
    return _print_inspect(args, st)  # a closed stdout (`| head`): cli.main ends the command quietly, status 141


def _print_inspect(args: argparse.Namespace, st: Any) -> int:
    m = st.manifest
    if args.json:
        print(json.dumps({k: v for k, v in m.items() if k != "symbols"} | {"n_symbols": len(m["symbols"])}))
        return 0
    from rich.console import Console
    from rich.table import Table

    sampled = all("sample" in f for f in m["files"].values())  # stores committed before sampled digests: sizes
    checked = "checksums verified" if args.verify else "sizes and sampled blocks checked" if sampled else \
        "sizes checked"
    if getattr(args, "derived_verified", 0):
        checked += f", and of {args.derived_verified} derived feature cache(s)"
    from stride.shown_text import literal, plain

    t = Table(title=literal(f"{st.path} ({checked})"))
    for col in ("symbol", "rows", "first", "last"):
        t.add_column(col)
    import numpy as np

    for r in m["symbols"][:20]:
        t.add_row(literal(r["symbol"]), f"{r['stop'] - r['start']:,}", str(np.datetime64(r["first_ts"], "ns")),
                  str(np.datetime64(r["last_ts"], "ns")))
    if len(m["symbols"]) > 20:
        t.add_row(f"... {len(m['symbols']) - 20} more", "", "", "")
    Console().print(t)
    size = m["files"]["values.bin"]["bytes"] / 2**20
    print(f"{m['n_rows']:,} rows, {len(m['columns'])} columns ({m['dtype']}, {size:.1f} MiB): "
          f"{', '.join(plain(c) for c in m['columns'])}")
    sys.stdout.flush()
    return 0


def run_probe(args: argparse.Namespace) -> int:
    """Measure afresh (the cached plan is replaced), as the training run with this config would use it."""
    import dataclasses

    import torch

    from stride.config import ConfigError, load_config, set_key
    from stride.data.build import build_data
    from stride.data.probe import plan_loader
    from stride.train.device import resolve_device

    try:
        cfg = load_config(args.config, args.set)
        if args.device is not None:  # checked as train.device is (auto, cpu, cuda, cuda:N), naming --device
            set_key(cfg, "train.device", args.device, "--device")
        device = resolve_device(cfg.train.device)
        if cfg.train.threads is not None:
            torch.set_num_threads(cfg.train.threads)
        data = dataclasses.replace(cfg.data, prefetch=0, gather_threads=1, device_resident=False)
        bundle = build_data(data, cfg.train.batch_size, device)  # the source, without a probe of its own
    except (ConfigError, OSError, ValueError) as exc:
        from stride.errors import one_line

        print(f"stride data probe: {one_line(str(exc))}", file=sys.stderr)
        return 2
    plan = plan_loader(bundle.train.source, cfg.train.batch_size, device, "auto", "auto",
                       cfg.data.store if cfg.data.source == "store" else None, fresh=True)
    out = plan.as_dict()
    if args.json:
        print(json.dumps(out))
        return 0
    f = out["figures"]
    print(f"host: {_host_line()}; device {device}")
    for name, ms in f["batch_ms"].items():
        print(f"  copy {name:22s} {ms:8.3f} ms a batch of {f['batch_windows']}")
    print(f"gather {f['gather_GBps_per_cpu_s']:.2f} GB per CPU-second against a copy of the same bytes at "
          f"{f['copy_GBps_per_cpu_s']:.2f} ({f['gather_fraction_of_copy']:.2f})")
    for what, why in out["reasons"].items():
        print(f"{what}: {why}")
    print(f"kept in {f['cache']}")
    return 0


def _host_line() -> str:
    import torch

    from stride.data.probe import cpu_name, usable_cores

    return f"{cpu_name()}, {usable_cores()} usable cores, torch {torch.get_num_threads()} threads"
