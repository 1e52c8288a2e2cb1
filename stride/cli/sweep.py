"""`stride sweep CONFIG --grid KEY=V1,V2 [--grid KEY=A..B ...] [--pack auto|N] [--backend local|ray] [--out DIR]`.

Trains every point of the grid (packed where it can: docs/sweep.md), writes each finished point into DIR as
it finishes, and the report (table.parquet, results.json, report.html, summary.md). Run the same command
again to resume a killed sweep: finished points are not trained again. SIGTERM and Ctrl-C stop it at the end
of a step (stride.sweep.stop): one line, the report of the finished points, exit status 130.
`--export POINT --export-to RUN_DIR` writes one point as a stride checkpoint that `stride train ... --out RUN_DIR`
resumes.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING

from stride.sweep.stats import MORE_SEEDS

if TYPE_CHECKING:
    from pathlib import Path

    from stride.sweep.grid import Point
    from stride.sweep.store import SweepStore


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="TOML run config, e.g. configs/quickstart.toml")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=VALUES",
                   help="an axis of the grid: KEY=v1,v2,... or KEY=a..b (integers, inclusive); repeatable (no "
                   f"default: a sweep needs one); seeds are an axis too ({MORE_SEEDS}: 2 or more per configuration "
                   "to test differences)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value for every point (as stride train --set; default: none)")
    p.add_argument("--pack", default="auto", help="models trained together: auto (default: memory model and a "
                   "throughput probe pick it) or N (1: every point alone, as stride train)")
    p.add_argument("--chunk", default="auto", help="models a packed step trains at once: auto (default: all of a "
                   "pack on a GPU, up to 16 on a CPU, fewer where the memory model says they do not fit) or N (at "
                   "most N: a pack is cut into nearly equal chunks, e.g. 18 into 2 of 9 for --chunk 16)")
    p.add_argument("--backend", default="local", choices=("local", "ray"),
                   help="local (default): packs one after another in this process; ray: each pack a Ray task")
    p.add_argument("--out", default=None, help="sweep directory (default: <metrics.out_dir>/<stamp>-sweep-<name>); "
                   "the same command again resumes it; one holding a train run or bench results is refused")
    p.add_argument("--ray-address", default=None, help="an existing Ray cluster (host:port, ray://host:port, auto); "
                   "default: start one on this machine")
    p.add_argument("--cpus-per-pack", type=int, default=1, help="CPUs Ray reserves for each pack's task (default 1)")
    p.add_argument("--probe-s", type=float, default=60.0,
                   help="time limit of the throughput probe per class, seconds (default 60)")
    p.add_argument("--price-per-hour", type=float, default=None,
                   help="USD per device-hour, for the cost lines (default: none, costs in device time only)")
    p.add_argument("--export", default=None, metavar="POINT",
                   help="point id (or index) to export as a checkpoint (default: none); checked before training")
    p.add_argument("--export-to", default=None, metavar="RUN_DIR",
                   help="run directory the checkpoint goes into (default: none; needed with --export)")
    p.set_defaults(func=run)


def _pack(text: str, option: str = "--pack") -> str | int:
    from stride.config.errors import ConfigError

    if text == "auto":
        return text
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"{option} {text!r}: auto or a positive integer")
    return n


def _log(msg: str) -> None:
    """A line of the sweep's progress; its names and values can come from the sweep's folder (point files): their
    control characters are shown as escapes, so none acts on the terminal (stride.shown_text)."""
    from stride.shown_text import plain

    print(f"stride sweep: {plain(msg, lines=True)}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from stride.config.errors import ConfigError
    from stride.files import run_lock
    from stride.files.folder_kind import refuse_others
    from stride.metrics.run_dir import RunDir
    from stride.sweep.grid import expand

    pack = _pack(args.pack)
    chunk = _pack(args.chunk, "--chunk")
    if (args.export is None) != (args.export_to is None):
        raise ConfigError("--export POINT and --export-to RUN_DIR go together")
    _check_numbers(args)
    base, axes, points = expand(args.config, args.overrides, args.grid, log=_log)  # a large grid says so at once
    exported = _export_point(points, args.export) if args.export is not None else None  # before any training
    if args.out:  # a training run's or a bench's folder is refused before anything is written
        refuse_others(args.out, "sweep")
    if exported is not None:  # the export's run folder: anything in it would mix with the checkpoint
        _check_export_to(Path(args.export_to), exported)
    out = Path(args.out) if args.out else RunDir.create(base.metrics.out_dir, f"sweep-{base.train.name}").path
    # The sweep folder is locked before anything is written in it (a second sweep on it used to be stopped only by
    # a point's run folder, after writing its report into the first one's folder: audit 16, L4). `nests`: its points'
    # run folders (runs/<id>) are locked by Ray tasks, other processes.
    with run_lock.held(out, "sweep folder", nests=True):
        return _sweep(args, out, axes, points, exported, pack, chunk)


def _sweep(args: argparse.Namespace, out: Path, axes: list, points: list[Point], exported: Point | None,
           pack: str | int, chunk: str | int) -> int:
    """Train the grid's points into `out` (locked by the caller), write the report; the exit status."""
    from pathlib import Path

    from stride.sweep.runner import Options, SweepError, load_pack_log
    from stride.sweep.runner import run as run_sweep
    from stride.sweep.stop import SweepStop, stop_reason
    from stride.sweep.store import SweepStore

    store = SweepStore(out)
    plan = store.plan(str(Path(args.config).resolve()), args.overrides, axes, points)
    store.open(plan)
    load_pack_log(store.root)  # packs.jsonl checked, as the point files were: one line before anything is said
    # a point the sweep will not train again (finished): its state file is read now, not after the training
    state = store.load_state(exported.id) if exported is not None and store.done(exported.id) else None
    _log(f"{len(points)} points ({' x '.join(str(len(a.values)) for a in axes)}) in {out}")
    stop = SweepStop()
    opts = Options(pack=pack, backend=args.backend, ray_address=args.ray_address, cpus_per_pack=args.cpus_per_pack,
                   probe_s=args.probe_s, chunk=None if chunk == "auto" else int(chunk), log=_log, stop=stop.check,
                   retake=stop.retake)
    interrupted: str | None = None
    failed: str | None = None
    try:
        with stop.installed():
            info = run_sweep(points, store, opts)
    except SweepError as exc:  # failed packs (after every other pack ran) or an unreachable Ray cluster
        failed = str(exc)
    except KeyboardInterrupt as exc:  # SIGTERM or Ctrl-C (SweepStopped), or a KeyboardInterrupt from elsewhere:
        interrupted = stop_reason(exc)  # every finished point is on disk whole (points/<id>.json, written last)
    finally:  # the report of the points finished so far, however the sweep ended
        _write_report(store, plan, points, args.price_per_hour)
    if failed is not None:  # the last line, after the report's, on both backends: how many failed, exit status 1
        if exported is not None and store.done(exported.id):  # its point finished: another pack's failure is no reason
            _export(store, exported, Path(args.export_to), args.config, args.overrides, state)
        _log(failed)
        return 1
    if interrupted is not None:
        return _stopped(store, points, interrupted)
    _log(f"trained {info['trained']} point(s) in {info['wall_s']:.1f} s; report: {out / 'report.html'}")
    if exported is not None:
        _export(store, exported, Path(args.export_to), args.config, args.overrides, state)
    return 0


def _stopped(store: SweepStore, points: list[Point], why: str = "interrupted") -> int:
    """One line for a sweep stopped by Ctrl-C or SIGTERM (after its report of the finished points): what it kept and
    how to go on; status 130, as main's fallback for other commands and as `stride bench` for both signals."""
    from stride.cli.main import INTERRUPTED

    done = sum(store.done(p.id) for p in points)
    kept = (f"{done} of {len(points)} points finished and are kept in {store.root}" if done
            else f"no point of {len(points)} finished")
    print(f"stride sweep: stopped ({why}): {kept}; run the same command again to "
          f"{'resume' if done else 'start'} it", file=sys.stderr, flush=True)
    return INTERRUPTED


def _check_numbers(args: argparse.Namespace) -> None:
    """The numeric options in range, before the grid is built or anything trains."""
    from stride.config.errors import ConfigError

    if args.cpus_per_pack < 1:
        raise ConfigError(f"--cpus-per-pack {args.cpus_per_pack}: need at least 1 CPU per pack")
    if not (math.isfinite(args.probe_s) and args.probe_s > 0):
        raise ConfigError(f"--probe-s {args.probe_s}: need a time limit in seconds > 0")
    if args.price_per_hour is not None and not (math.isfinite(args.price_per_hour) and args.price_per_hour >= 0):
        raise ConfigError(f"--price-per-hour {args.price_per_hour}: need a price >= 0 (USD per device-hour)")


def _write_report(store, plan, points, price) -> None:
    from stride.sweep.report import significance_line
    from stride.sweep.report_files import unreliable_text, write_report
    from stride.sweep.runner import load_pack_log

    results = store.results([p.id for p in points])
    failed = store.failures([p.id for p in points])  # their last attempt's pack raised: said in the report
    if results or failed:  # every point failed: the report still lists them
        packs = load_pack_log(store.root)
        seeds = [p.config.train.seed for p in points]
        section = write_report(store.root, plan, results, packs, price, failed=failed, seeds=seeds)
        if not results:  # every point failed: the report lists them; no ranking, cost or pairs to say
            return
        _log_best(results, advice=section["seed_advice"])
        c = section["cost"]
        pairs = significance_line(section["pairs"], section["seed_advice"])
        if packs and not c["packed_packs"]:  # nothing was packed: no speed-up figure, nor a note on one
            _log(f"every point trained alone (pack size 1): {c['sweep_device_s']:.1f} s of runs; {pairs}")
        elif c["train_speedup"]:
            _log(f"training steps: {c['sweep_train_s']:.1f} s packed against {c['one_by_one_s']:.1f} s one by one "
                 f"({c['train_speedup']:.2f}x"
                 + (f", UNRELIABLE: {unreliable_text(c)}" if unreliable_text(c) else "")
                 + f"; packs' wall time {c['sweep_device_s']:.1f} s with set-up and validation); {pairs}")
        else:  # no speed-up figure (every point diverged before one was measured): the pairs are still said
            _log(pairs)


def _log_best(results, top: int = 5, advice: str = f"add seeds with {MORE_SEEDS}") -> None:
    """The configurations ranked as the report ranks them (stride.sweep.report.configuration_stats): lowest mean
    final val loss first, those with diverged seeds after those without, each with how many seeds its mean is over
    of how many trained and how many diverged (a configuration with 4 of 6 seeds diverged came first on its 2
    survivors with nothing said). The sd only where there are 2 or more seeds (one seed's "+- 0.0000" claimed a
    noise-free value). A loss that is not a finite number counts as no loss, as in the report's statistics. `advice`:
    what gives a lone seed its noise (stride.sweep.report.seed_advice: not the grid's own seeds again)."""
    from stride.sweep.report import configuration_stats, seeds_text

    rows = configuration_stats(results)
    for row in rows[:top]:
        name, k, n = row["configuration"] or "(seeds only)", row["seeds"], row["trained"]
        if row["mean"] is None:
            what = (f"all {n} seeds diverged" if row["diverged"] == n else f"no final val loss ({seeds_text(row)})")
            _log(f"  {what}  {name}")
            continue
        if k > 1 and row["sd"] is None:  # a spread past the float range (extreme losses in the point files)
            spread = f"(sd past the float range over {seeds_text(row)})"
        elif k > 1:
            spread = f"+- {row['sd']:.4f} (sd over {seeds_text(row)})"
        elif n == 1:
            spread = f"(1 seed: seed noise unknown; {advice})"
        else:  # one seed left of several: not more seeds, the divergence is the result
            spread = f"({seeds_text(row)}: seed noise unknown)"
        mean = f"{row['mean']:.4f}" if abs(row["mean"]) < 1e6 else f"{row['mean']:.4g}"  # 1e307 was 308 digits
        _log(f"  {mean} {spread}  {name}")
    if len(rows) > top:
        hidden = rows[top:]
        some = sum(r["diverged"] > 0 for r in hidden)
        _log(f"  ({len(hidden)} more configuration(s) in summary.md"
             f"{f', {some} of them with diverged seeds' if some else ''})")


def _export_point(points, which: str):
    """The grid's point that --export names (its id, or its index in the grid), checked before the sweep trains."""
    from stride.config.errors import ConfigError, first_few

    match = [p for p in points if p.id == which] or (
        [points[int(which)]] if which.isdigit() and int(which) < len(points) else [])
    if not match:
        shown = first_few((f"{p.id} ({p.label})" for p in points), 3)
        raise ConfigError(f"--export {which!r}: no such point in this grid; give a point id ({shown}; all in the "
                          f"sweep directory's sweep.json) or an index 0..{len(points) - 1}")
    return match[0]


def _check_export_to(run_dir, p) -> None:
    """--export-to holding a training run (its files or checkpoints), a bench or a sweep is refused before the
    sweep trains: the exported checkpoint would mix with them (an earlier export's checkpoint of the same step
    used to stop the export only after the whole sweep, as another run's checkpoint)."""
    from stride.files.folder_kind import KINDS, refuse_others

    refuse_others(run_dir, "train", "--export-to", kinds=KINDS, writes=f"point {p.id}'s checkpoint",
                  why="`stride train --out` of that folder would not continue the exported point alone",
                  checkpoint_dirs=("checkpoints", p.config.checkpoint.dir))


def _export(store, p, run_dir, config: str, overrides: list[str], state=None) -> None:
    import json
    import shlex

    from stride.sweep.export import export_checkpoint

    folder = export_checkpoint(p.config, state if state is not None else store.load_state(p.id), run_dir, log=_log)
    sets = " ".join(f"--set {shlex.quote(o)}" for o in [*overrides, *(f"{k}={json.dumps(v)}" for k, v in
                                                                        p.values.items())])
    line = f"stride train {config} {sets} --set checkpoint.enabled=true --out {run_dir}"
    step, steps = _exported_step(folder), p.config.train.steps
    if step is not None and step >= steps:  # the point finished: the same command would say so and train nothing
        _log(f"point {p.id} ({p.label}) exported to {folder}, finished at step {step}; train it further with:\n"
             f"  {line} --set train.steps={2 * steps}  (any train.steps above {steps})")
    else:
        _log(f"point {p.id} ({p.label}) exported to {folder}; resume it with:\n  {line}")


def _exported_step(folder) -> int | None:
    """The step of a `step_NNNNNNNN` checkpoint folder (None for another name)."""
    from pathlib import Path

    from stride.files.step_names import STEP_RE

    m = STEP_RE.match(Path(folder).name)
    return int(m.group(1)) if m else None

