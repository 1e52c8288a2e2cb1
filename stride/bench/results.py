"""`results.json`: a versioned schema that `stride compare`, `stride report` and `stride plan` read.

Version 2 adds the optional `scaling` section (a world-size sweep: one record per strategy, scaling
mode and process count). Version 1 files are read as version 2 without that section: everything a
version-1 file holds means the same in version 2. The version was bumped rather than the key added
silently because version-1 readers interpreted a `scaling` key differently ({series: [[x, y]]}) and
would misdraw a version-2 file instead of refusing it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from stride.files.input_file import InputFileError, InputFileMissing, read_input_text
from stride.files.strict_json import finite_number

SCHEMA = "stride.bench.results"
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
REQUIRED_WORKLOAD_KEYS = ("name", "throughput", "mfu", "peak_mem_bytes", "step_time_breakdown_s", "time_to_target_s")
REQUIRED_THROUGHPUT_KEYS = ("unit", "median", "min", "max", "cv")
REQUIRED_SCALING_KEYS = ("points", "pinning", "repeats")
REQUIRED_POINT_KEYS = ("workload", "strategy", "scaling", "world_size", "per_rank_batch", "global_batch",
                       "throughput", "speedup", "efficiency", "exposed_comm_fraction", "oversubscribed")
SCALING_MODES = ("baseline", "weak", "strong")


class ResultsError(ValueError):
    pass


def _number_or_none(v: Any) -> bool:
    return v is None or finite_number(v)


def validate_scaling(sc: Any, where: str) -> None:
    """The `scaling` section: every point names its workload, strategy, mode, N and its figures."""
    if not isinstance(sc, dict):
        raise ResultsError(f"{where}: scaling must be an object with {', '.join(REQUIRED_SCALING_KEYS)}")
    for key in REQUIRED_SCALING_KEYS:
        if key not in sc:
            raise ResultsError(f"{where}: scaling is missing {key!r}")
    if not isinstance(sc["points"], list):
        raise ResultsError(f"{where}: scaling.points must be a list")
    for i, p in enumerate(sc["points"]):
        at = f"{where}: scaling.points[{i}]"
        if not isinstance(p, dict):
            raise ResultsError(f"{at} is not an object")
        at += f" ({p.get('workload', '?')} {p.get('strategy', '?')} {p.get('scaling', '?')} N={p.get('world_size')})"
        for key in REQUIRED_POINT_KEYS:
            if key not in p:
                raise ResultsError(f"{at} is missing {key!r}")
        if p["scaling"] not in SCALING_MODES:
            raise ResultsError(f"{at}: scaling {p['scaling']!r} is not one of {', '.join(SCALING_MODES)}")
        n = p["world_size"]
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ResultsError(f"{at}: world_size {n!r} is not a positive integer")
        if p["scaling"] == "baseline" and n != 1:
            raise ResultsError(f"{at}: the baseline runs on 1 rank, not {n}")
        for key in REQUIRED_THROUGHPUT_KEYS:
            if not isinstance(p["throughput"], dict) or key not in p["throughput"]:
                raise ResultsError(f"{at}: throughput is missing {key!r}")
        if why := throughput_order_problem(p["throughput"]) or cv_problem(p["throughput"]):
            raise ResultsError(f"{at}: {why}")
        for key in ("speedup", "efficiency", "exposed_comm_fraction"):
            if not _number_or_none(p[key]):
                raise ResultsError(f"{at}: {key} {p[key]!r} is not a finite number or null")
        if p["per_rank_batch"] * n != p["global_batch"]:
            raise ResultsError(f"{at}: per_rank_batch {p['per_rank_batch']} x {n} ranks != global_batch "
                               f"{p['global_batch']}")
        if why := point_consistency_problem(p):
            raise ResultsError(f"{at}: {why}")


# Figures of one point that stride derives from each other, compared to this relative precision: JSON keeps
# 17 digits, so stride's own files agree to ~1e-15; an edited figure is off by far more.
DERIVED_RTOL = 1e-6


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=DERIVED_RTOL, abs_tol=1e-12)


def point_consistency_problem(p: dict[str, Any]) -> str | None:
    """A point whose derived figures contradict their sources (None: consistent). efficiency is speed-up / N in
    both modes, and oversubscribed is ranks_per_core > 1 with ranks_per_core = N / cores: an edited efficiency of
    5.0 beside a speed-up of 0.88 at N=2, or `oversubscribed` false at 2 ranks a core, was shown and advised on."""
    n, eff, sp = p["world_size"], p["efficiency"], p["speedup"]
    if finite_number(eff) and finite_number(sp) and not _close(eff, sp / n):
        return (f"efficiency {eff!r} != speedup / world_size = {sp!r} / {n} = {sp / n:.6g}: stride derives one "
                "from the other; the file is damaged or edited")
    cores, rpc, over = p.get("cores"), p.get("ranks_per_core"), p["oversubscribed"]
    if not isinstance(over, bool):
        return f"oversubscribed {over!r} is not true or false"
    if rpc is not None and not (finite_number(rpc) and rpc > 0):
        return f"ranks_per_core {rpc!r} is not a positive number"
    if cores is not None and not (isinstance(cores, int) and not isinstance(cores, bool) and cores > 0):
        return f"cores {cores!r} is not a positive count"
    if rpc is not None and cores is not None and not _close(rpc, n / cores):
        return f"ranks_per_core {rpc!r} != world_size / cores = {n} / {cores}"
    if rpc is not None and over != (rpc > 1):
        return (f"oversubscribed {str(over).lower()} beside ranks_per_core {rpc!r}: oversubscribed means more than "
                "one rank a core (ranks_per_core > 1)")
    if rpc is None and cores is not None and over != (n > cores):
        return f"oversubscribed {str(over).lower()} beside {n} ranks on {cores} cores"
    return None


def cv_problem(t: dict[str, Any]) -> str | None:
    """A cv its own measurements cannot have (None: possible, or not checkable). The population cv of n values
    >= 0 is at most sqrt(n - 1) (all but one at 0), and their sd at most (max - min) / 2 over a mean of at least
    min, so cv <= (max - min) / (2 min); min == max: cv 0. compare widens its noise band by the cv, so an
    impossible one (1e9, or 0.9 beside min == max) turned any change into "within noise"."""
    cv, n, lo, hi = t.get("cv"), t.get("n"), t.get("min"), t.get("max")
    if not finite_number(cv) or cv < 0:
        return None  # null, or a type or range the other checks name
    if finite_number(n) and n >= 1 and n == int(n) and cv > math.sqrt(n - 1) * (1 + DERIVED_RTOL):
        return (f"throughput.cv = {cv!r} is impossible for throughput.n = {n!r} measurements: the cv of n values "
                f">= 0 is at most sqrt(n - 1) = {math.sqrt(n - 1):.4g}; the file is damaged or edited")
    if finite_number(lo) and finite_number(hi) and lo > 0 and hi >= lo:
        bound = (hi - lo) / lo / 2  # not / (2 * lo): 2 * 1e308 overflows
        if cv > bound * (1 + DERIVED_RTOL) + 1e-12:
            return (f"throughput.cv = {cv!r} is impossible beside throughput.min = {lo!r} and max = {hi!r}: "
                    f"measurements in that range have a cv of at most (max - min) / (2 min) = {bound:.4g}; the file "
                    "is damaged or edited")
    return None


def throughput_order_problem(t: dict[str, Any]) -> str | None:
    """A median outside its own [min, max], or min > max (None: in order). Such a file is damaged or hand-edited,
    and compare judged its ratio (a 1e308 median: a 2.3e304x ratio) as if measured. A negative figure is left to
    the range check of compare and report, which names it plainly ("below 0")."""
    med, lo, hi = t.get("median"), t.get("min"), t.get("max")
    if not all(_number_or_none(v) and v is not None and v >= 0 for v in (med, lo, hi)):
        return None  # null (no measurement), or a type or range that other checks name
    if lo > hi:
        return f"throughput.min = {lo!r} is above throughput.max = {hi!r}"
    if not lo <= med <= hi:
        return (f"throughput.median = {med!r} lies outside [min {lo!r}, max {hi!r}]: a median lies between its "
                "measurements' min and max")
    return None


FIGURES = ("mfu", "peak_mem_bytes", "time_to_target_s", "timesteps_per_s", "flops_per_step", "steps",
           "skipped_steps", "saved_activation_bytes", "params", "exposed_comm_fraction", "comm_cost_fraction",
           "peak_flops_per_s", "peak_clock_ghz")  # finite numbers or null where present
LOSSES = ("final_val_loss", "final_train_loss", "target_val_loss")  # numbers or null; NaN/inf: a diverged run


def workload_type_problem(w: dict[str, Any]) -> str | None:
    """The type of each figure `stride compare` and `stride report` compute with (None: all as written)."""
    if not isinstance(w["name"], str):
        return f"name {w['name']!r} is not a string"
    t = w["throughput"]
    if not isinstance(t["unit"], str) or not t["unit"].strip():
        return f"throughput.unit {t['unit']!r} is not a unit (text such as 'samples/s')"
    for key in ("median", "min", "max", "cv"):
        if not _number_or_none(t[key]):
            return f"throughput.{key} {t[key]!r} is not a finite number or null"
    if not _number_or_none(t.get("n")):
        return f"throughput.n {t.get('n')!r} is not a count"
    for key in FIGURES:
        if not _number_or_none(w.get(key)):
            return f"{key} {w.get(key)!r} is not a finite number or null"
    for key in LOSSES:
        v = w.get(key)
        if v is not None and not (isinstance(v, int | float) and not isinstance(v, bool)):
            return f"{key} {v!r} is not a number or null"
    b = w["step_time_breakdown_s"]
    if not isinstance(b, dict) or not all(isinstance(k, str) and _number_or_none(v) and v is not None
                                          for k, v in b.items()):
        return "step_time_breakdown_s is not an object of finite seconds per phase"
    return None


def partial_problem(partial: Any) -> str | None:
    """What is wrong with a `partial` section (a stopped sweep: {done, planned, pending}), or None. stride writes
    counts and workload names there; anything else is a damaged or crafted file, which report.html put into the
    page as it was (outside audit 14, H2: a `<script>` in `partial.done` ran in the reader's browser)."""
    if partial is None:
        return None
    if not isinstance(partial, dict):
        return f"partial is {type(partial).__name__}, not an object {{done, planned, pending}}"

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    done, planned, pending = partial.get("done"), partial.get("planned"), partial.get("pending")
    if not count(done):
        return f"partial.done = {str(done)[:40]!r} is not a count of runs (a whole number >= 0)"
    if not count(planned) or planned < done:
        return f"partial.planned = {str(planned)[:40]!r} is not a count of runs >= partial.done ({done})"
    if not isinstance(pending, list) or not all(isinstance(n, str) for n in pending):
        return "partial.pending is not a list of workload names"
    return None


def validate_results(obj: Any, where: str = "results.json") -> dict[str, Any]:
    """Check `obj` and return it as the current version (a version-1 file gains schema_version 2)."""
    if not isinstance(obj, dict) or obj.get("schema") != SCHEMA:
        raise ResultsError(f"{where}: not a stride results file (missing schema = {SCHEMA!r})")
    version = obj.get("schema_version")
    if version not in READABLE_VERSIONS:
        raise ResultsError(f"{where}: schema_version {version!r}, this stride reads "
                           f"{', '.join(map(str, READABLE_VERSIONS))}")
    for key in ("suite", "environment", "workloads"):
        if key not in obj:
            raise ResultsError(f"{where}: missing key {key!r}")
    if not isinstance(obj["workloads"], list) or not isinstance(obj["environment"], dict):
        raise ResultsError(f"{where}: workloads must be a list and environment an object")
    for i, w in enumerate(obj["workloads"]):
        if not isinstance(w, dict):
            raise ResultsError(f"{where}: workloads[{i}] is not an object")
        for key in REQUIRED_WORKLOAD_KEYS:
            if key not in w:
                raise ResultsError(f"{where}: workloads[{i}] ({w.get('name', '?')}) is missing {key!r}")
        if not isinstance(w["throughput"], dict):
            raise ResultsError(f"{where}: workloads[{i}].throughput is not an object")
        for key in REQUIRED_THROUGHPUT_KEYS:
            if key not in w["throughput"]:
                raise ResultsError(f"{where}: workloads[{i}].throughput is missing {key!r}")
        if why := (workload_type_problem(w) or throughput_order_problem(w["throughput"])
                   or cv_problem(w["throughput"])):
            raise ResultsError(f"{where}: workloads[{i}] ({str(w.get('name'))[:40]}): {why}")
    if why := partial_problem(obj.get("partial")):
        raise ResultsError(f"{where}: {why}")
    if version == 1:
        if "scaling" in obj:
            raise ResultsError(f"{where}: a scaling section needs schema_version 2 (version 1 defined none)")
        return {**obj, "schema_version": SCHEMA_VERSION}
    if "scaling" in obj:
        validate_scaling(obj["scaling"], where)
    return obj


RESULTS_MAX_BYTES = 512 << 20  # a 100,000-point sweep's results.json is tens of MB


def load_results(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:  # a regular file only: a FIFO or /dev/zero is refused, not read forever
        obj = json.loads(read_input_text(p, limit=RESULTS_MAX_BYTES, what="results file"))
    except InputFileMissing as exc:
        raise ResultsError(f"{p}: no such file") from exc
    except InputFileError as exc:
        raise ResultsError(str(exc)) from None
    except (ValueError, RecursionError) as exc:  # an integer over 4300 digits, nesting thousands deep: not only
        raise ResultsError(f"{p}: not valid JSON ({exc})") from None  # JSONDecodeError (they were tracebacks)
    return validate_results(obj, str(p))


def make_results(suite: str, environment: dict[str, Any], workloads: list[dict[str, Any]],
                 scaling: dict[str, Any] | None = None, where: str = "results.json") -> dict[str, Any]:
    obj: dict[str, Any] = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "suite": suite,
                           "environment": environment, "workloads": workloads}
    if scaling is not None:
        obj["scaling"] = scaling
    return validate_results(obj, where)
