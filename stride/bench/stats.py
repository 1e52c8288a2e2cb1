"""Spread of repeated measurements: median, min, max and coefficient of variation."""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stride.bench.results import RESULTS_MAX_BYTES
from stride.files.input_file import InputFileError, read_input_text
from stride.files.strict_json import finite_number


def spread(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"median": None, "min": None, "max": None, "cv": None, "n": 0}
    mean = statistics.fmean(values)
    # one value has no spread: its cv is null, not 0 (which would read as a perfectly steady measurement)
    cv = statistics.pstdev(values) / mean if len(values) > 1 and mean else None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "cv": cv, "n": len(values)}


# 1.4826 x the median absolute deviation estimates a normal spread's sd, and one preempted step moves it little
MAD_TO_SD = 1.4826


def step_cv(rates: list[float]) -> float | None:
    """The spread of one run's per-step rates, as a cv: 1.4826 x MAD / median (robust: one preempted step of 926
    samples/s among 1,720s made 3 windows of 2 logged steps read a cv of 19 %), at most the plain population cv (so
    it never exceeds what the rates' min and max allow). None for fewer than 3 rates."""
    if len(rates) < 3:
        return None
    med = statistics.median(rates)
    mad = statistics.median([abs(r - med) for r in rates])
    return min(MAD_TO_SD * mad / med, statistics.pstdev(rates) / statistics.fmean(rates))


def one_run(t: dict) -> bool:
    """Whether a throughput is one measurement (n 1, or an older file's cv 0 with min = max): its cv says nothing."""
    return t.get("n") == 1 or (t.get("n") is None and t.get("cv") == 0.0 and t.get("min") == t.get("max"))


def spread_text(t: dict) -> str:
    """A throughput's cv for a table, or "1 run" where there is one measurement (its cv of 0 says nothing)."""
    if one_run(t):
        return "1 run"
    return "-" if t.get("cv") is None else f"{100 * t['cv']:.1f}%"


def bootstrap_ci(values: list[float], stat: Callable[[list[float]], float] = statistics.median, level: float = 0.95,
                 resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of `stat` over `values` (resampled with replacement, fixed seed).

    For paired ratios from a noisy machine: no normality assumed, and a fixed seed makes the
    interval itself reproducible from the same measurements.
    """
    if not values:
        raise ValueError("bootstrap_ci of no values")
    rng = random.Random(seed)
    n = len(values)
    stats = sorted(stat([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    lo = stats[int((1 - level) / 2 * (resamples - 1))]
    hi = stats[int((1 + level) / 2 * (resamples - 1))]
    return lo, hi


def run_step_rates(run: Path, s: dict[str, Any], cfg: dict[str, Any]) -> tuple[list[float], str | None]:
    """(the samples/s of each timed step logged in a run's metrics.jsonl, None), or ([], why not).

    Here, below stride.report, so that `stride compare` (stride.report.inputs, a run folder) and the world sweep (one
    run per point: stride.bench.world) read a run's steps alike; it was in stride.report.inputs.

    A run folder's one figure had no spread, so two runs were judged against an assumed 2 % while their steps varied
    8-10 % (two identical quick starts read 0.902, "slower"); `stride.bench.stats.step_cv` makes these rates a cv.
    The rows log one step in `metrics.log_every`, each its own samples/s (not `time_s`, the training clock, which
    holds validation and checkpoint pauses); the timed ones are those after `metrics.skip_steps` of this process's
    segment (after `start_step` of a resumed run: its rows follow the earlier process's, the step going back where it
    resumed). Any row that is not what stride writes (a cut line, not JSON, a non-finite or non-positive time or
    rate, steps going back in a run that did not resume) gives no spread, not an
    error: the summary's figure stands on its own, and the note says which line."""
    path = run / "metrics.jsonl"
    if not path.exists():
        return [], "no metrics.jsonl beside summary.json"
    if not path.is_file():  # a FIFO or a device would block or never end: not read
        return [], "metrics.jsonl is not a regular file"
    try:
        text = read_input_text(path, limit=RESULTS_MAX_BYTES, what="run metrics")
    except InputFileError as exc:
        return [], str(exc)
    start, skip = s.get("start_step", 0), (cfg.get("metrics") or {}).get("skip_steps", 3)
    start = 0 if start is None else start
    for key, v in (("summary.json start_step", start), ("config.toml metrics.skip_steps", skip)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return [], f"{key} = {str(v)[:40]!r} is not a step count"
    rows: list[tuple[int, float]] = []  # (step, samples/s) of the current segment
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):  # JSONDecodeError, and an integer over 4300 digits (a plain ValueError)
            return [], f"metrics.jsonl line {i} is not JSON (a cut or damaged line)"
        if not isinstance(rec, dict):
            return [], f"metrics.jsonl line {i} is {type(rec).__name__}, not a JSON object"
        if "step_time_s" not in rec:  # validation rows carry no step time
            continue
        step, sec, rate = rec.get("step"), rec.get("step_time_s"), rec.get("samples_per_s")
        if not isinstance(step, int) or isinstance(step, bool):
            return [], f"metrics.jsonl line {i}: step = {str(step)[:40]!r} is not a step number"
        for key, v in (("step_time_s", sec), ("samples_per_s", rate)):
            if not (finite_number(v) and v > 0):
                return [], f"metrics.jsonl line {i}: {key} = {str(v)[:40]!r} is not a finite number above 0"
        if rows and step <= rows[-1][0]:
            if not start or step <= start:  # only a resume (start_step > 0) restarts the steps, above its start
                return [], (f"metrics.jsonl line {i}: step {step} after step {rows[-1][0]} (steps go back, and "
                            f"not to a resume after start_step {start})")
            rows = []  # the earlier process's rows past the checkpoint this process resumed from
        rows.append((step, rate))
    steps = s.get("steps")
    last = steps if isinstance(steps, int) and not isinstance(steps, bool) else None
    timed_from = start + skip if last is None or last - start > skip else start  # as the trainer's warm-up rule
    timed = [r for r in rows if r[0] > timed_from]
    if len(timed) < 3:
        return [], (f"metrics.jsonl logs {len(timed)} timed steps (after metrics.skip_steps {skip}"
                    f"{f' from start_step {start}' if start else ''}); a spread needs 3")
    return [r[1] for r in timed], None
