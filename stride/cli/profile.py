"""`stride profile CONFIG [--steps N] [--set k=v] [--out DIR] [--overwrite] [--json]`: train under torch.profiler,
write one Chrome trace per rank, and print the bottleneck analysis of the traced steps."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from stride.files import strict_json

WARN_TRACED_STEPS = 20  # above this a note says what the trace will cost
MAX_TRACED_STEPS = 1000  # above this the profiler's memory, not the analysis, is what the run would measure
# The longest traced step over the shortest above this is warned of: the verdict reads the steps' summed breakdown,
# which one long step then outweighs. The quick-start MLP on a shared 2-core host: 10 steps after --wait 4 took
# 3.0-3.8 ms (1.3x), two steps under load 4.0 and 7.3 ms (1.8x); two steps after --wait 2 took 10.7 and 240 ms (22x;
# the audit's 4.7 and 241 ms, 51x), a first step still allocating read "memory-bound". 3x is above the jitter, far
# below such outliers.
SPREAD_MAX_OVER_MIN = 3.0
FEW_STEPS = 2  # this many analysed steps or fewer: the verdict is said to rest on too few


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="TOML run config, e.g. configs/quickstart.toml")
    p.add_argument("--steps", type=int, default=3, help="active (traced) steps (default 3, at most 1000)")
    p.add_argument("--wait", type=int, default=4, help="unprofiled steps before warm-up; those after the first are "
                   "timed, for the profiler's own cost (default 4)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up steps traced but discarded (default 1)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set train.batch_size=16 (repeatable; default: none); "
                   "train.steps, val_every, target_val_loss and metrics.progress are set from the options here")
    p.add_argument("--out", default=None, help="run directory; traces go to DIR/traces/ "
                   "(default: <metrics.out_dir>/<stamp>-<name>)")
    p.add_argument("--json", action="store_true", help="print the analysis as one JSON object (default: tables)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a run already in --out (as stride train --overwrite; refused otherwise)")
    p.set_defaults(func=run)


def quiet_profiler() -> None:
    """Keep torch.profiler's C++ chatter off the terminal (a user may still set either variable).

    Kineto prints `USDT: ... profiler_start` / `profiler_stop` at its USDT level (5) unless its log
    level is above that (it reads KINETO_LOG_LEVEL when the profiler first starts); c10 warns "Memory
    block of unknown size was allocated before the profiling started" for every tensor freed while
    memory profiling that predates it (the model, the optimizer state): TORCH_CPP_LOG_LEVEL is read
    when torch loads, so this runs before the first torch import of `stride profile`."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")


def workload_speeds(config: str, overrides: list[str], steps: int = 4, rounds: int = 2):  # -> DtypeSpeeds | None
    """This workload's training step in fp32 and in each lower precision whose matmul this host
    measured faster (alternating, `rounds` short runs each, median samples/s): the evidence precision
    advice needs, since a faster matmul is not a faster step (the quick-start transformer: bf16 matmul
    2.6x, training step 0.61x fp32's speed on this project's AMD EPYC). None where no dtype qualifies."""
    import statistics

    from stride.config import load_config
    from stride.metrics.dtype_speed import FASTER, DtypeSpeeds, measured_dtype_flops
    from stride.train.trainer import Trainer

    probe = measured_dtype_flops()
    dtypes = [d for d in ("bf16", "fp16") if probe[d] >= FASTER * probe["fp32"]]
    if not dtypes:
        return None
    runs: dict[str, list[float]] = {d: [] for d in ("fp32", *dtypes)}
    for _ in range(rounds):
        for d in runs:
            cfg = load_config(config, [*overrides, f"train.precision={d}", f"train.steps={steps}", "train.val_every=0",
                                       "train.target_val_loss=none", "metrics.progress=false", "metrics.skip_steps=1",
                                       "metrics.flops=false", "checkpoint.enabled=false"])
            runs[d].append(Trainer(config=cfg, write_run_dir=False).fit().summary["samples_per_s"] or 0.0)
    return DtypeSpeeds({d: statistics.median(v) for d, v in runs.items()}, "workload")


def wait_for_traces(folder: Path, world: int, timeout_s: float = 120.0) -> None:
    """Rank 0 waits until every rank's trace is in `folder` (each is renamed into place when complete)."""
    import time

    deadline = time.monotonic() + timeout_s
    while len(list(folder.glob("trace_rank*.json"))) < world:
        if time.monotonic() > deadline:
            found = sorted(p.name for p in folder.glob("trace_rank*.json"))
            raise SystemExit(f"stride profile: {len(found)} of {world} rank traces in {folder} after {timeout_s:.0f} s "
                             f"({', '.join(found) or 'none'}); analyse what is there with `stride analyze {folder}`")
        time.sleep(0.2)


def label_step_time(summary: dict, unprofiled_s: float | None, profiled_s: list[float]) -> None:
    """The profiled and the unprofiled steps' times beside summary.json's step time, each labelled, and a note on
    what the step time covers. The trainer's `step_time_s` is the mean over its timed steps, profiled and unprofiled
    alike (5 traced of 8 timed read 67.99 ms, neither the profiled 72.45 nor the unprofiled 57.84: outside audit);
    it stays the figure `samples_per_s` and the MFU are computed from (samples/s = batch / step time). The
    unprofiled figure is the median of the `--wait` steps, the run's earliest, which may still be warming up (a
    contended host read 1,072 ms unprofiled against 385 ms profiled), so it is given beside, not instead."""
    timed = summary.get("step_time_s")
    profiled = sum(profiled_s) / len(profiled_s) if profiled_s else None
    summary["step_time_profiled_s"] = profiled
    summary["step_time_unprofiled_s"] = unprofiled_s
    ms = (lambda x: f"{x * 1e3:.2f} ms" if isinstance(x, float) else "-")  # noqa: E731
    summary["step_time_note"] = (
        f"step_time_s ({ms(timed)}) is the mean over all {summary.get('timed_steps', '?')} timed steps, profiled ones "
        f"included, as samples_per_s and mfu are; the profiled steps took {ms(profiled)} (the profiler's own cost "
        "included), the unprofiled --wait steps before the profiler started "
        + (f"{ms(unprofiled_s)} (median; the run's earliest steps, which may still be warming up)"
           if unprofiled_s is not None else "were not timed (--wait 2 or more times them)"))


def step_time_labels(cb):  # -> Callback (torch is imported only when a profile runs)
    """The callback that labels summary.json's step time (`label_step_time`) from the profiler callback `cb`'s
    timings: its unprofiled median and its traced steps' totals."""
    from stride.train.callbacks import Callback

    class StepTimeLabels(Callback):
        def on_fit_end(self, trainer, summary: dict) -> None:
            totals = [float(s["total"]) for s in cb.active_step_times if isinstance(s.get("total"), (int, float))]
            label_step_time(summary, cb.unprofiled_step_s, totals)

    return StepTimeLabels()


def run(args: argparse.Namespace) -> int:
    quiet_profiler()
    from stride.config import load_config
    from stride.config.errors import ConfigError
    from stride.metrics.dtype_speed import speeds_of_trace
    from stride.profile.analyze import analyze_traces
    from stride.train.profiling import ProfilerCallback, steps_needed
    from stride.train.trainer import Trainer

    for name in ("steps", "wait", "warmup"):
        least = 1 if name == "steps" else 0
        if getattr(args, name) < least:  # it said only "is out of range" (first-contact audit of 2026-12-07)
            raise ConfigError(f"--{name} = {getattr(args, name)} is out of range: it must be >= {least}"
                              + (" (traced steps)" if name == "steps" else ""))
    # torch.profiler holds every event of every traced step in memory until the end, and the trace grows with each:
    # on the quick-start model (CPU) 3 steps wrote 3.4 MB and peaked at 0.55 GB, 12 steps 14 MB and 0.66 GB
    # (about 1.2 MB of trace and 12 MB of memory a step; more for bigger models). The analysis takes the median step.
    if args.steps > MAX_TRACED_STEPS:
        raise ConfigError(f"--steps {args.steps}: at most {MAX_TRACED_STEPS} traced steps (each adds about 1 MB of "
                          "trace and 12 MB of profiler memory on the quick-start model, more on bigger ones; the "
                          "analysis reads the median step, so a few are enough)")
    if args.steps > WARN_TRACED_STEPS:
        print(f"stride profile: note: --steps {args.steps} traces every step: about {args.steps * 1.2:.0f} MB of trace "
              f"and {args.steps * 12 / 1024:.1f} GB of profiler memory on the quick-start model, more on bigger "
              "ones; the analysis reads the median step, so a few are enough", file=sys.stderr)
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1 and not args.out:
        raise ConfigError("under torchrun give --out DIR: every rank writes its trace to DIR/traces")
    n = steps_needed(args.wait, args.warmup, args.steps)
    cfg = load_config(args.config, [*args.overrides, f"train.steps={n}", "train.val_every=0",
                                    "train.target_val_loss=none", "metrics.progress=false"])
    # every rank into the same folder (only rank 0 has a run directory object to ask)
    traces = Path(args.out) / "traces" if args.out else None  # None: <run dir>/traces
    cb = ProfilerCallback(traces, wait=args.wait, warmup=args.warmup, active=args.steps)
    trainer = Trainer(config=cfg, out=args.out, callbacks=[cb, step_time_labels(cb)], overwrite=args.overwrite)
    result = trainer.fit()
    on_cpu = trainer.device.type == "cpu"
    # the trainer (its model, an FSDP2 mesh) holds the process groups: drop it and them now, not at interpreter exit,
    # where a gloo thread ended by the finalizing interpreter aborted rank 1 (SIGABRT, "terminate called without an
    # active exception": 1 of the CI runs of 2026-12-06), as `stride train` does
    del trainer
    if world > 1:
        from stride.cli.train import release_process_groups

        release_process_groups()
    if rank != 0:
        return 0  # rank 0 analyses every rank's trace
    if world > 1:
        wait_for_traces(cb.out_dir, world)
    speeds = None
    if on_cpu and cfg.train.precision == "fp32" and world == 1:
        speeds = workload_speeds(args.config, args.overrides)
    report = analyze_traces([cb.out_dir], run_precision=cfg.train.precision,
                            dtype_speeds=(lambda t: speeds) if speeds
                            else lambda t: speeds_of_trace(t.has_device, t.meta.get("host_name")))
    if speeds:
        report["dtype_speeds"] = {"basis": speeds.basis, "samples_per_s": speeds.per_dtype}  # the evidence
    report["step_spread"] = step_spread(report)
    if result.run_dir:
        (result.run_dir / "analysis.json").write_text(strict_json.dumps(report, default=float, indent=1))
    if args.json:
        print(strict_json.dumps(report, default=float))
        return 0
    from stride.profile.render import render_report

    render_report(report)
    if speeds:
        print(speeds_line(speeds))
    for line in report["step_spread"]["warnings"]:
        print(f"stride profile: warning: {line}")
    print(f"traces: {cb.out_dir}; analysis: {result.run_dir / 'analysis.json' if result.run_dir else '-'}")
    return 0


def speeds_line(speeds: Any) -> str:
    """The step's speed in each precision `stride profile` measured, as one line: README says profile "measures which
    precision helps on your machine", and the figures were only in analysis.json (first-contact audit of 2026-12-07:
    fp32 63.6 against bf16 34.9 samples/s on the quick start, while the printed advice said only "measure")."""
    per = speeds.per_dtype
    base = per.get("fp32") or 0.0
    parts = [f"{d} {v:,.1f}" + (f" ({v / base:.2f}x fp32)" if base and d != "fp32" else "")
             for d, v in per.items() if v]
    what = "this workload's step" if speeds.basis == "workload" else "a matmul"
    unit = " samples/s" if speeds.basis == "workload" else ""
    return f"precision: {what} measured {', '.join(parts)}{unit} on this machine"


def step_spread(report: dict) -> dict:
    """The traced steps' durations per rank, and what they say of the verdict: `warnings` (lines) where the longest
    step took more than SPREAD_MAX_OVER_MIN times the shortest (a step still warming up, or a stall: the mean and the
    verdict are of neither) or where FEW_STEPS steps or fewer were analysed. Each warned rank's verdict gets the line
    as its `caveat` too (the JSON's reader sees it beside the bound). `stride profile` 2 steps of 4.7 and 241 ms
    reported "memory-bound" from their 122.85 ms mean without a word."""
    ranks, warnings = {}, []
    many = len(report.get("ranks", {})) > 1
    for rank, r in report.get("ranks", {}).items():
        spans = [s["span_us"] / 1e3 for s in r.get("per_step", []) if (s.get("span_us") or 0) > 0]
        if not spans:
            continue
        lo, hi = min(spans), max(spans)
        mean = sum(spans) / len(spans)
        sd = (sum((x - mean) ** 2 for x in spans) / len(spans)) ** 0.5
        ranks[rank] = {"steps": len(spans), "min_ms": lo, "max_ms": hi, "mean_ms": mean,
                       "max_over_min": hi / lo, "cv": sd / mean}
        who = f"rank {rank}: " if many else ""
        said = []
        if hi / lo > SPREAD_MAX_OVER_MIN:
            said.append(f"{who}the {len(spans)} traced steps took {lo:.1f} to {hi:.1f} ms ({hi / lo:.0f}x apart, "
                        f"more than {SPREAD_MAX_OVER_MIN:g}x): the verdict reads their summed time, which the longest "
                        "step outweighs, and a step still warming up (allocating, filling caches) or stalled is not a "
                        "typical one; trace more steps after a longer warm-up, e.g. --steps 10 --wait 10")
        if len(spans) <= FEW_STEPS:
            said.append(f"{who}the verdict rests on {len(spans)} traced step{'s' if len(spans) > 1 else ''}, too few "
                        "to tell a typical step from an outlier; use --steps 5 or more")
        if said and isinstance(r.get("verdict"), dict):
            r["verdict"]["caveat"] = "; ".join(said)
        warnings += said
    return {"threshold_max_over_min": SPREAD_MAX_OVER_MIN, "ranks": ranks, "warnings": warnings}
