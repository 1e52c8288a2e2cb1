"""World-size sweep: each workload through `stride train` under torchrun at 1, 2, 4, ... processes.

Every point is a real `stride train` run launched exactly as `stride train --nproc N` launches it
(`stride.launch.torchrun`: the same torchrun command line and worker environment), with two
additions for a measurement that means something on a small CPU box: one intra-op thread per rank
(`train.threads=1`) and each rank pinned to its own core (`stride.bench.pinning`), the 1-rank
baseline included. Repeats run in rounds (every point once per round, the order reversed on
alternate rounds), so slow spells on a shared machine fall on all points alike; efficiency per round
pairs a point with that round's baseline.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from stride.bench.pinning import CorePlan, core_plan
from stride.bench.progress import fmt_duration
from stride.bench.rank_entry import SCHED_ENV
from stride.bench.runner import make_entry, workload_config
from stride.bench.scaling import Point, plan_points, point_record
from stride.bench.stats import run_step_rates, step_cv
from stride.bench.workloads import Workload
from stride.config import config_to_dict, config_to_toml
from stride.config.errors import ConfigError
from stride.launch import lifeline
from stride.launch.torchrun import inside_launcher, launcher_env, torchrun_command

ENTRY = ["-m", "stride.bench.rank_entry"]  # `python -m stride`, pinned first (stride.bench.rank_entry)
METHOD = ("one figure per run: the trainer's throughput over its timed steps (after metrics.skip_steps "
          "warm-up), {n} run(s) per point in alternating rounds; `stride train` under torchrun, "
          "one intra-op thread per rank")


class SweepError(RuntimeError):
    pass


def rank_command(entry: list[str], nproc: int) -> list[str]:
    """The torchrun line `stride train --nproc` uses (`torchrun_command`), running `entry` instead.

    `entry` is what follows `python` in each rank, e.g. `-m stride.bench.rank_entry train CONFIG`.
    """
    cmd = torchrun_command([], nproc=nproc)
    tail = ["-m", "stride", "train"]
    if cmd[-len(tail):] != tail:
        raise SweepError(f"stride.launch.torchrun.torchrun_command changed shape (ends {cmd[-3:]}); "
                         "update stride.bench.world.rank_command")
    return [*cmd[: -len(tail)], *entry]


def rank_env(plan: CorePlan, threads: int | None) -> dict[str, str]:
    """`stride train --nproc`'s worker environment plus the core plan; no launcher variables leak in."""
    env = {**launcher_env(threads), **plan.env()}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "TORCHELASTIC_RUN_ID"):
        env.pop(k, None)
    return env


def run_point(w: Workload, p: Point, device: str, run_dir: Path, extra: list[str], plan: CorePlan,
              timeout_s: float = 1800, attempts: int = 2) -> tuple[Any, dict[str, Any]]:
    """Train `w` at point `p` under torchrun; (resolved config, rank 0's summary.json).

    A failed launch is retried once (`attempts`): on a shared machine a rendezvous can fail for
    reasons outside the run (a port taken between torchrun choosing and binding it). The failed
    attempt's log is kept (`torchrun.failed-<k>.log`) and the summary records `launch_retries`.
    """
    cpu = device == "cpu"
    threads = ["train.threads=1"] if cpu else []
    cfg = workload_config(w, f"{w.name}+{p.label}", device, [*extra, *threads, *p.overrides()])
    from stride.parallel.layout import resolve_layout

    resolve_layout(cfg.parallel, p.world_size)  # a bad layout fails here, before torchrun starts
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "sweep_config.toml"
    out = run_dir / "run"
    text = config_to_toml(cfg)
    if (out / "summary.json").is_file() and config_path.is_file() and config_path.read_text() == text:
        # a stopped sweep rerun with the same --out: this run finished with the same config, keep it
        return cfg, _checked_summary(w, p, run_dir, json.loads((out / "summary.json").read_text()), [])
    if out.exists():  # a run stopped mid-way (or with another config): not a result, start afresh
        shutil.rmtree(out)
    config_path.write_text(text)
    cmd = rank_command([*ENTRY, "train", str(config_path), "--out", str(out), "--no-progress"], p.world_size)
    # torchrun and its ranks end with this process however it ends, as `stride train --nproc`'s do
    # (stride.launch.lifeline): a bench killed by SIGTERM or SIGKILL left them training on into the point's folder
    env = {**rank_env(plan, 1 if cpu else cfg.train.threads), SCHED_ENV: str(run_dir), **lifeline.env_for_ranks()}
    failures: list[str] = []
    for attempt in range(1, attempts + 1):
        if out.exists():  # a failed attempt's partial run: `stride train` refuses to start a new one over it
            shutil.rmtree(out)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False,
                                  preexec_fn=lifeline.child_setup())  # noqa: PLW1509 (no other thread forks here)
        except subprocess.TimeoutExpired as exc:
            raise SweepError(f"{w.name} {p.label}: no result after {timeout_s:.0f} s (torchrun killed)") from exc
        log = f"$ {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
        (run_dir / "torchrun.log").write_text(log)
        summary_path = out / "summary.json"
        if proc.returncode == 0 and summary_path.is_file():
            break
        failures.append(f"attempt {attempt}: exit {proc.returncode} after {time.perf_counter() - t0:.0f} s: "
                        f"{worker_error(proc.stderr)}")
        (run_dir / f"torchrun.failed-{attempt}.log").write_text(log)
    else:
        raise SweepError(f"{w.name} {p.label} on {p.world_size} rank(s) failed; logs in {run_dir}:\n"
                         + "\n".join(failures))
    return cfg, _checked_summary(w, p, run_dir, json.loads(summary_path.read_text()), failures)


def _checked_summary(w: Workload, p: Point, run_dir: Path, summary: dict[str, Any], failures: list[str]
                     ) -> dict[str, Any]:
    if summary.get("world_size") != p.world_size:
        raise SweepError(f"{w.name} {p.label}: the trainer ran on {summary.get('world_size')} rank(s), "
                         f"not {p.world_size}")
    summary["runqueue_wait_share"] = runqueue_wait_share(run_dir, p.world_size)
    summary["launch_retries"] = failures
    return summary


def worker_error(stderr: str, lines: int = 12) -> str:
    """The ranks' own error lines from torchrun's stderr (its agent's traceback and summary left out)."""
    agent = ("torch/distributed/elastic", "torch/distributed/run.py", "torch/distributed/launcher",
             "ChildFailedError", "<frozen runpy>", "elastic_launch", "launch_agent", "error_file", "traceback :")
    keep = [ln for ln in stderr.splitlines()
            if ln.strip() and not any(a in ln for a in agent) and not set(ln.strip()) <= set("=-")]
    hits = [i for i, ln in enumerate(keep) if "Error" in ln or "error" in ln or "Exception" in ln]
    if not hits:
        return " | ".join(keep[-lines:]) or "(no error text; see the log)"
    return " | ".join(keep[max(0, hits[0] - 2): hits[0] + lines])


def runqueue_wait_share(run_dir: Path, world_size: int) -> float | None:
    """Mean over ranks of run-queue wait / (CPU + run-queue wait) of each rank's main thread, over its life.

    The share of the time a rank was ready to run but had no core: other processes on the machine (or
    its own oversubscription). None when a rank did not report (no schedstat on this OS).
    """
    shares = []
    for r in range(world_size):
        f = run_dir / f"sched-rank{r}.json"
        if not f.is_file():
            return None
        rec = json.loads(f.read_text())
        busy = rec["cpu_s"] + rec["runqueue_wait_s"]
        shares.append(rec["runqueue_wait_s"] / busy if busy else 0.0)
    return sum(shares) / len(shares)


def throughput_of(summary: dict[str, Any], unit: str) -> float:
    key = "timesteps_per_s" if unit == "tokens/s" else "samples_per_s"
    value = summary.get(key)
    if not value:
        raise SweepError(f"{summary.get('name')}: summary has no {key} (too few steps after warm-up?)")
    return float(value)


def plan_world(w: Workload, device: str, world_sizes: list[int], strategies: list[str], scalings: list[str],
               extra: list[str] | None = None, repeats: int = 1) -> tuple[Any, str, list[Point]]:
    """(the workload's config, the device, the sweep's points) of a world sweep of `w`: every check of the command
    line against the workload (its kind, torchrun, the GPUs, --world-sizes, --strategies, --scaling), with nothing
    printed or run, so `stride bench` refuses a bad one before its first line (`--world-sizes 0` printed "bench
    mlp_tiny: world sweep ..." before the error)."""
    if w.kind != "supervised":
        raise ConfigError(f"--sweep world: {w.name} runs its own loop ({w.kind}), not the Trainer; "
                          "choose a supervised workload")
    if inside_launcher():
        raise ConfigError("--sweep world starts torchrun itself: run `stride bench` outside torchrun")
    if repeats < 1:
        raise ConfigError(f"--repeats {repeats}: need >= 1")
    base_cfg = workload_config(w, w.name, device, list(extra or []))
    dev = "cuda" if device == "auto" and _cuda() else ("cpu" if device == "auto" else device)
    if dev.startswith("cuda"):
        import torch

        if max(world_sizes) > torch.cuda.device_count():
            raise ConfigError(f"--world-sizes {max(world_sizes)} needs that many GPUs; "
                              f"{torch.cuda.device_count()} visible")
    return base_cfg, dev, plan_points(base_cfg.train.batch_size, world_sizes, strategies, scalings)


def world_sweep(w: Workload, device: str, out: Path, world_sizes: list[int], strategies: list[str],
                scalings: list[str], extra: list[str] | None = None, repeats: int = 1,
                log: Callable[[str], None] = print
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[int, CorePlan]]:
    """(results.json entries, scaling points, the core plan of each world size) for workload `w`."""
    _, dev, points = plan_world(w, device, world_sizes, strategies, scalings, extra, repeats)
    extra = list(extra or [])
    plans = {n: core_plan(n, pin=dev == "cpu") for n in {p.world_size for p in points}}
    for n, plan in sorted(plans.items()):
        log(f"  {n} rank(s): {plan.describe()}")
    runs: dict[Point, list[tuple[Any, dict[str, Any]]]] = {p: [] for p in points}
    total, done, t0 = repeats * len(points), 0, time.perf_counter()
    try:
        with sigterm_interrupts():
            for r in range(repeats):
                order = points if r % 2 == 0 else points[::-1]
                for p in order:
                    d = out / f"{w.name}+{p.label}" / f"rep{r}"
                    cfg, s = run_point(w, p, dev, d, extra, plans[p.world_size])
                    runs[p].append((cfg, s))
                    done += 1
                    left = (time.perf_counter() - t0) / done * (total - done)
                    log(f"  [{done}/{total}] round {r + 1}/{repeats} {p.label:16s} "
                        f"{throughput_of(s, w.throughput_unit):12,.0f} {w.throughput_unit}; ETA {fmt_duration(left)}")
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: subprocess.run has killed torchrun, the lifeline its ranks
        why = exc.args[0] if exc.args else "SIGINT"
        log(f"  {w.name}: stopped by {why}: {done} of {total} run(s) finished; the same command with --out {out} "
            "resumes (finished runs are kept, the stopped one starts afresh)")
        raise
    base = points[0]
    base_tputs = [throughput_of(s, w.throughput_unit) for _, s in runs[base]]
    base_sums = [s for _, s in runs[base]]
    slots = len(plans[base.world_size].cores) if dev == "cpu" else max(world_sizes)
    entries, records = [], []
    for p in points:
        tputs = [throughput_of(s, w.throughput_unit) for _, s in runs[p]]
        sums = [s for _, s in runs[p]]
        cfg0 = runs[p][0][0]
        name = f"{w.name}+{p.label}"
        entry = make_entry(w, name, cfg0, tputs, METHOD, _median_summary(sums, tputs),
                           run_dir=str(out / name / "rep0" / "run"), runs=len(tputs), world_size=p.world_size,
                           scaling=p.scaling, strategy=p.strategy)
        if len(tputs) == 1:  # --repeats 1: no spread over runs; its own timed steps' spread, as compare's run folder
            one_run_spread(entry, out / name / "rep0" / "run", sums[0], cfg0)
        entries.append(entry)
        records.append(point_record(w.name, p, w.throughput_unit, tputs, sums, base_tputs, base_sums,
                                    base.global_batch, slots, name))
    return entries, records, plans


ONE_RUN_SPREAD = ("; one run: its cv is the robust spread (1.4826 x MAD / median) of its {n} timed steps' samples/s "
                  "logged in rank 0's metrics.jsonl, which holds no drift between runs (--repeats 3 measures that)")


def one_run_spread(entry: dict[str, Any], run: Path, summary: dict[str, Any], cfg: Any) -> None:
    """Give a point of one run (`--repeats 1`) the spread of its own timed steps, as `stride compare` gives a `stride
    train` run folder (stride.bench.stats.run_step_rates, step_cv): the cv, n (the timed steps), min and max.

    Its one figure had no spread, so `stride compare` judged two such points against an assumed 2 %: of 28 pairs of
    identical mlp_tiny points (8 sweeps, AMD EPYC family 26 model 2, 2 cores, shared) it called 26 (1 rank) and 27
    (2 ranks) faster or slower; with their steps' spread 21 and 3 (docs/bench.md, world sweep). What is left is drift
    between runs, which no run's own steps show: a one-run verdict is a hint, `--repeats 3` the measurement. Where the
    steps give none (metrics.jsonl missing, damaged or under 3 timed steps) the figure stays one run and `spread_note`
    says why, as compare's run folder does."""
    rates, why = run_step_rates(run, summary, config_to_dict(cfg))
    cv = step_cv(rates)
    if cv is None:
        entry["spread_note"] = f"one run per point (--repeats 1), and {why}"
        return
    t = entry["throughput"]
    t.update(cv=cv, n=len(rates), min=min(*rates, t["median"]), max=max(*rates, t["median"]))
    entry["throughput_method"] += ONE_RUN_SPREAD.format(n=len(rates))


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops the sweep as Ctrl-C does (KeyboardInterrupt: one line, exit status 130, the point's torchrun
    killed by subprocess.run), not by the default action, which ended this process without a word. Main thread only,
    where handlers can be set; the earlier handler put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt("SIGTERM")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _median_summary(summaries: list[dict[str, Any]], tputs: list[float]) -> dict[str, Any]:
    """The repeat whose throughput is the median (lower median): its figures stand for the point's."""
    order = sorted(range(len(tputs)), key=lambda i: tputs[i])
    return summaries[order[(len(order) - 1) // 2]]


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def scaling_section(records: list[dict[str, Any]], plans: dict[int, CorePlan], repeats: int,
                    load_avg: tuple[float | None, float | None]) -> dict[str, Any]:
    return {
        "method": ("weak: per-rank batch fixed, efficiency = per-rank throughput(N) / throughput(1); strong: "
                   "global batch fixed, efficiency = throughput(N) / (N x throughput(1)); efficiency from the "
                   "medians over repeats, efficiency_rounds pairs each repeat with the same round's baseline"),
        "pinning": {str(n): plan.describe() for n, plan in sorted(plans.items())},
        "cores": list(next(iter(plans.values())).cores),
        "repeats": repeats,
        "load_avg_1min": list(load_avg),  # before and after: other processes on the machine skew the figures
        "points": records,
    }


def load_avg() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None
