"""What `stride compare` and `stride report` read: a results.json, a bench directory, or a training run.

A `stride train` run directory (summary.json, config.toml, env.json, metrics.jsonl) is read as a
results file with one workload: its throughput is the run's own figure over its timed steps (one
measurement, so no spread: `n` = 1), the other figures are the summary's.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from stride.bench.results import ResultsError, load_results, make_results

KINDS = "a results.json, a `stride bench` directory or a `stride train` run directory"


def resolve(path: str | Path) -> tuple[dict[str, Any], Path]:
    """(results, the directory a report of them goes to) for any of the three inputs."""
    p = Path(path)
    if p.is_dir():
        if (p / "results.json").is_file():
            return load_results(p / "results.json"), p
        if (p / "summary.json").is_file():
            return results_from_run(p), p
        raise ResultsError(f"{p}: holds neither results.json nor summary.json; expected {KINDS}")
    if not p.exists():
        raise ResultsError(f"{p}: no such file or directory; expected {KINDS}")
    if p.name == "summary.json":
        return results_from_run(p.parent), p.parent
    return load_results(p), p.parent


def _read_json(p: Path) -> dict[str, Any]:
    try:
        obj = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{p}: not valid JSON ({exc})") from exc
    if not isinstance(obj, dict):
        raise ResultsError(f"{p}: expected a JSON object")
    return obj


def results_from_run(run: Path) -> dict[str, Any]:
    """A one-workload results object from a `stride train` run directory."""
    s = _read_json(run / "summary.json")
    env = _read_json(run / "env.json") if (run / "env.json").is_file() else {}
    cfg: dict[str, Any] = {}
    if (run / "config.toml").is_file():
        try:
            cfg = tomllib.loads((run / "config.toml").read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ResultsError(f"{run / 'config.toml'}: not valid TOML ({exc})") from exc
    tput = s.get("samples_per_s")
    entry = {
        "name": s.get("name") or run.name, "version": None, "config": cfg, "source": "stride train",
        "throughput": {"unit": "samples/s", "median": tput, "min": tput, "max": tput, "cv": None,
                       "n": 1 if tput else 0},
        "throughput_method": "the run's samples over its timed steps (after metrics.skip_steps warm-up)",
        "mfu_peak_source": s.get("peak_flops_source"),
        **{k: s.get(k) for k in ("timesteps_per_s", "mfu", "flops_per_step", "peak_mem_kind", "time_to_target_s",
                                 "target_val_loss", "final_val_loss", "final_train_loss", "steps",
                                 "skipped_steps", "saved_activation_bytes", "params", "params_sha256")},
        "peak_mem_bytes": s.get("peak_mem_bytes") or 0,
        "step_time_breakdown_s": s.get("step_time_breakdown_s") or {},
        "run_dir": str(run),
    }
    return make_results("train run", env, [entry], where=str(run / "summary.json"))
