"""What `stride compare` and `stride report` read: a results.json, a bench directory, or a training run.

A `stride train` run directory (summary.json, config.toml, env.json, metrics.jsonl) is read as a
results file with one workload: its throughput is the run's own figure over its timed steps, with the spread
of the timed steps logged in its metrics.jsonl (`run_step_rates`, made a cv by `stride.bench.stats.step_cv`);
where those rows cannot give one, it is one measurement with no spread (`n` = 1) and `spread_note` says why. The
other figures are the summary's.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

from stride.bench.results import RESULTS_MAX_BYTES, ResultsError, load_results, make_results
from stride.bench.stats import run_step_rates, step_cv  # run_step_rates: read here and by bench's world sweep
from stride.files.input_file import InputFileError, read_input_text
from stride.files.strict_json import finite_number

KINDS = "a results.json, a `stride bench` directory or a `stride train` run directory"
# Figures that cannot be negative (rates, times, sizes, counts), as a summary.json or a results entry names
# them; MFU is achieved over peak FLOP/s, which stride leaves null rather than write above 1.
NON_NEGATIVE = ("samples_per_s", "timesteps_per_s", "step_time_s", "wall_time_s", "flops_per_step", "peak_mem_bytes",
                "time_to_target_s", "lost_time_s", "steps", "skipped_steps", "saved_activation_bytes", "params",
                "world_size", "run_queue_waiting_threads")


def contention_problem(s: dict[str, Any]) -> str | None:
    """What is wrong with a summary's or results entry's contention fields (a note that is not text, a wait that is
    not a number), or None. Refused rather than read past: a note that is not text counts as none
    (stride.report.contended), and the run would be judged as measured on a quiet host."""
    note, waiting = s.get("contention_note"), s.get("run_queue_waiting_threads")
    if note is not None and not isinstance(note, str):
        return f"contention_note = {note!r} is not text or null (the run's note on a contended host)"
    if waiting is not None and not finite_number(waiting):
        return (f"run_queue_waiting_threads = {waiting!r} is not a number or null (threads waiting for a core on "
                "average)")
    return None


# The most any rate of a run can be, per second (samples, timesteps or tokens): no machine computes above about 1e19
# FLOP/s (the largest supercomputers are near 1e18), and no sample, timestep or token of any model costs fewer than
# about 1e4 FLOPs (this repository's tiny MLP: about 2e6 a sample), so 1e15/s is a bound no measurement reaches, with
# room to spare. A figure above it is a damaged or crafted file: a 1e308 median was printed as a 309-digit integer
# and judged "faster" by a ratio of 1e300.
RATE_MAX_PER_S = 1e15
# and the least a measured rate above 0 can be: one sample in 30 years (0 stays: no measurement, shown "n/a"); a
# 1e-310 median made the ratio of two medians overflow, or read as 0 ("slower")
RATE_MIN_PER_S = 1e-9
# What MFU divides by and the clock a CPU peak was read at: above 0 where given (null: unknown). A negative peak made
# compare's peak note vanish (its test skips peaks <= 0) while the MFUs beside it were shown as measured.
POSITIVE = ("peak_flops_per_s", "peak_clock_ghz")
RATES = ("samples_per_s", "timesteps_per_s", "throughput.median", "throughput.min", "throughput.max")


def range_problem(figures: dict[str, Any]) -> str | None:
    """The first figure of a summary.json or results entry outside its possible range (a negative rate or
    time, an MFU above 1, NaN), which would otherwise be shown and judged as measured; None: all possible.
    A value that is not a number is left to the type checks of whoever reads it."""
    nested = [(f"{sec}.{k}", v) for sec in ("throughput", "step_time_breakdown_s")
              if isinstance(figures.get(sec), dict) for k, v in figures[sec].items() if k not in ("unit", "n")]
    for key, v in [(k, figures.get(k)) for k in ("mfu", *NON_NEGATIVE, *POSITIVE)] + nested:
        if not isinstance(v, int | float) or isinstance(v, bool):
            continue
        if not math.isfinite(v):
            return f"{key} = {v!r} is not a finite number"
        if key in POSITIVE and v <= 0:
            return (f"{key} = {v!r} is impossible: a peak FLOP/s or clock is above 0 (null where unknown); the file "
                    "is damaged or edited")
        if v < 0 or (key == "mfu" and v > 1):
            return f"{key} = {v!r} is impossible ({'MFU is a fraction from 0 to 1' if key == 'mfu' else 'below 0'})"
        if key in RATES and 0 < v < RATE_MIN_PER_S:
            return (f"{key} = {v:.6g} is impossible: a measured rate above 0 is at least {RATE_MIN_PER_S:.0e} a "
                    "second (one sample in 30 years); the file is damaged or edited")
        if key in RATES and v > RATE_MAX_PER_S:
            return (f"{key} = {v:.6g} is impossible: no run measures above {RATE_MAX_PER_S:.0e} a second (that is "
                    "beyond the FLOP/s of any machine at any model's FLOPs a sample); the file is damaged or edited")
    return None


def resolve(path: str | Path) -> tuple[dict[str, Any], Path]:
    """(results, the directory a report of them goes to) for any of the three inputs."""
    p = Path(path)
    if p.is_dir():
        if (p / "results.json").is_file():
            return _load_checked(p / "results.json"), p
        if (p / "summary.json").is_file():
            return results_from_run(p), p
        raise ResultsError(f"{p}: holds neither results.json nor summary.json; expected {KINDS}")
    if not p.exists():
        raise ResultsError(f"{p}: no such file or directory; expected {KINDS}")
    if p.name == "summary.json":
        return results_from_run(p.parent), p.parent
    return _load_checked(p), p.parent


def count_problem(t: dict[str, Any]) -> str | None:
    """What is impossible about a throughput's count of measurements `n` (a negative or fractional count, a median
    of no measurements), or None."""
    n = t.get("n")
    if n is None:
        return None
    if not isinstance(n, int | float) or isinstance(n, bool) or n < 0 or n != int(n):
        return f"throughput.n = {n!r} is not a count of measurements (a whole number >= 0)"
    given = [k for k in ("median", "min", "max") if t.get(k) is not None]
    if n == 0 and given:
        return (f"throughput.n = 0 (no measurement) beside throughput.{given[0]} = {t[given[0]]!r}: a figure of no "
                "measurements; n counts the measurements the figures are of")
    return None


def _load_checked(p: Path) -> dict[str, Any]:
    """A results file whose every figure is possible (the schema checks types, not ranges), with at least one
    workload and each workload once: `compare` matches workloads by name (a second entry of one name was dropped
    silently) and `report` would list it twice, as if two configurations had been measured."""
    res = load_results(p)
    if not res["workloads"]:
        partial = res.get("partial")
        why = (f"a stopped sweep with none of its {partial.get('planned')} runs measured"
               if isinstance(partial, dict) else "nothing to compare or report")
        raise ResultsError(f"{p}: workloads is empty: {why}")
    seen: dict[str, int] = {}
    for i, w in enumerate(res["workloads"]):
        name = str(w["name"])[:40]
        if why := range_problem(w) or count_problem(w["throughput"]) or contention_problem(w):
            raise ResultsError(f"{p}: workloads[{i}] ({name}): {why}")
        if w["name"] in seen:
            raise ResultsError(f"{p}: workloads[{i}] ({name}) is listed twice (also workloads[{seen[w['name']]}]): "
                               "each workload once, as stride writes them (which entry is the measurement?)")
        seen[w["name"]] = i
    return res


def _read_json(p: Path, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(read_input_text(p, limit=RESULTS_MAX_BYTES, what=what))
    except InputFileError as exc:  # a FIFO or /dev/zero: refused, not read forever
        raise ResultsError(str(exc)) from None
    except (ValueError, RecursionError) as exc:  # not only JSONDecodeError: an integer over 4300 digits is a plain
        # ValueError, nesting thousands deep a RecursionError; both were tracebacks (or a line without the file)
        raise ResultsError(f"{p}: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ResultsError(f"{p}: expected a JSON object")
    return obj


CONFIG_MAX_BYTES = 16 << 20  # a run's config.toml is a few KiB


def results_from_run(run: Path) -> dict[str, Any]:
    """A one-workload results object from a `stride train` run directory."""
    s = _read_json(run / "summary.json", "run summary")
    if why := range_problem(s) or contention_problem(s):
        raise ResultsError(f"{run / 'summary.json'}: {why}")
    env = _read_json(run / "env.json", "run environment file") if (run / "env.json").is_file() else {}
    cfg: dict[str, Any] = {}
    if (run / "config.toml").is_file():
        try:  # read_input_text: non-UTF-8 bytes named with their offset (a UnicodeDecodeError traceback in compare)
            cfg = tomllib.loads(read_input_text(run / "config.toml", limit=CONFIG_MAX_BYTES, what="run config"))
        except InputFileError as exc:
            raise ResultsError(str(exc)) from None
        except (ValueError, RecursionError) as exc:  # TOMLDecodeError; an integer over 4300 digits: a ValueError
            raise ResultsError(f"{run / 'config.toml'}: not valid TOML ({exc})") from None
    tput = s.get("samples_per_s")
    if tput is not None and not finite_number(tput):  # named as the file names it, not as throughput.median
        raise ResultsError(f"{run / 'summary.json'}: samples_per_s = {str(tput)[:40]!r} is not a number or null (the "
                           "run's throughput.median)")
    rates, why_not = run_step_rates(run, s, cfg) if tput else ([], None)
    throughput = {"unit": "samples/s", "median": tput, "min": tput, "max": tput, "cv": None,
                  "n": 1 if tput is not None else 0}
    method = "the run's samples over its timed steps (after metrics.skip_steps warm-up)"
    if (cv := step_cv(rates)) is not None:  # the run's figure, with the spread its logged steps had
        throughput.update(cv=cv, n=len(rates), min=min(*rates, tput), max=max(*rates, tput))
        method += (f"; cv: the robust spread (1.4826 x MAD / median) of its {len(rates)} timed steps' samples/s "
                   "logged in metrics.jsonl (one step in metrics.log_every)")
    entry = {
        "name": s.get("name") or run.name, "version": None, "config": cfg, "source": "stride train",
        "throughput": throughput, "throughput_method": method,
        # why the figure has no spread (metrics.jsonl missing, damaged or too short): one figure, the 2 % floor
        "spread_note": why_not,
        "mfu_peak_source": s.get("peak_flops_source"),
        **{k: s.get(k) for k in ("timesteps_per_s", "mfu", "flops_per_step", "peak_mem_kind", "time_to_target_s",
                                 "target_val_loss", "final_val_loss", "final_train_loss", "steps",
                                 "skipped_steps", "saved_activation_bytes", "params", "params_sha256",
                                 # read by the report's communication rule and compare's peak check
                                 "exposed_comm_fraction", "comm_cost_fraction", "comm_core_free",
                                 "peak_flops_per_s", "peak_clock_ghz",
                                 # whether the run's host was contended (stride.metrics.contention), as a bench
                                 # entry carries it: compare then gives no verdict, report no bottleneck of the model
                                 "run_queue_waiting_threads", "contention_note",
                                 # training seconds restarts repeated: the report's cost to target counts them
                                 "lost_time_s")},
        "world_size": s.get("world_size"),  # processes: part of what a run measured (stride compare checks it)
        "peak_mem_bytes": s.get("peak_mem_bytes") or 0,
        "step_time_breakdown_s": s.get("step_time_breakdown_s") or {},
        "run_dir": str(run),
        "runs": 1,  # its spread is of one run's steps (stride compare's one-run note)
    }
    return make_results("train run", env, [entry], where=str(run / "summary.json"))
