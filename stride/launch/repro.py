"""Re-run a recorded run from its run directory and say whether the result matches.

A run directory holds the resolved `config.toml`, `env.json` (git commit, dirty state, package
versions, hardware) and `summary.json` (params_sha256, config_hash, final loss). In deterministic
mode the re-run must reproduce the parameters bit for bit; otherwise the final loss must agree
within a relative tolerance. Differences in code version and packages are reported beside the
verdict because they are the usual reason a match fails.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stride.config import ConfigError, config_hash, load_config

HARDWARE_KEYS = ("cpu_model", "gpus")


@dataclass
class ReproReport:
    original: Path
    rerun: Path
    deterministic: bool
    params_match: bool
    loss_original: float
    loss_rerun: float
    loss_rel_diff: float
    tolerance: float
    config_hash_match: bool
    env_diff: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def other_hardware(self) -> bool:
        """The re-run ran on another CPU model or GPUs: vectorised kernels round differently across
        CPU families (fused AdamW differs in the last bit between AMD EPYC and Intel), so bitwise
        equality is only expected on the same hardware."""
        return any(k in self.env_diff for k in HARDWARE_KEYS)

    @property
    def matches(self) -> bool:
        """Bitwise parameters in deterministic mode on the same hardware; otherwise the final loss
        within tolerance."""
        if self.deterministic and not self.other_hardware:
            return self.params_match
        return self.params_match or self.loss_rel_diff <= self.tolerance

    @property
    def verdict(self) -> str:
        if self.params_match:
            return "bitwise match (params_sha256 equal)"
        if self.matches:
            why = ""
            if self.deterministic:
                why = " (other hardware: bitwise equality is expected on the same CPU/GPU only)"
            return (f"match within tolerance (final loss rel. diff {self.loss_rel_diff:.2e} <= {self.tolerance:.0e})"
                    + why)
        if self.deterministic:
            return "MISMATCH: deterministic run, but params_sha256 differs"
        return f"MISMATCH: final loss rel. diff {self.loss_rel_diff:.2e} > {self.tolerance:.0e}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "original": str(self.original), "rerun": str(self.rerun), "deterministic": self.deterministic,
            "matches": self.matches, "verdict": self.verdict, "params_match": self.params_match,
            "loss_original": self.loss_original, "loss_rerun": self.loss_rerun,
            "loss_rel_diff": self.loss_rel_diff, "tolerance": self.tolerance,
            "config_hash_match": self.config_hash_match,
            "env_diff": {k: list(v) for k, v in self.env_diff.items()},
        }


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"{path} not found: is {path.parent} a finished stride run directory?")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc}); the run may not have finished") from exc


def env_diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """What differs between two env.json fingerprints: code version, packages, Python, hardware."""
    out: dict[str, tuple[Any, Any]] = {}
    for key in ("git_commit", "git_dirty", "python", "torch_cuda", "cpu_model", "cpu_count", "gpus", "hostname"):
        if a.get(key) != b.get(key):
            out[key] = (a.get(key), b.get(key))
    pa, pb = a.get("packages") or {}, b.get("packages") or {}
    for pkg in sorted(set(pa) | set(pb)):
        if pa.get(pkg) != pb.get(pkg):
            out[f"packages.{pkg}"] = (pa.get(pkg), pb.get(pkg))
    return out


def _rel_diff(a: float, b: float) -> float:
    if math.isnan(a) and math.isnan(b):
        return 0.0
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def default_rerun_dir(run_dir: Path) -> Path:
    base = run_dir.parent / f"{run_dir.name}-repro"
    path, i = base, 1
    while path.exists():
        path, i = run_dir.parent / f"{run_dir.name}-repro-{i}", i + 1
    return path


def reproduce(run_dir: str | Path, out: str | Path | None = None, tolerance: float = 1e-5,
              overrides: list[str] | None = None) -> ReproReport:
    """Re-run `run_dir`'s recorded config into `out` (default `<run_dir>-repro`) and compare."""
    from stride.train.trainer import Trainer

    run_dir = Path(run_dir)
    if run_dir.is_file():
        raise ConfigError(f"{run_dir}: a file; give the run directory that holds it ({run_dir.parent})"
                          if run_dir.name in ("summary.json", "config.toml", "env.json")
                          else f"{run_dir}: a file, not a run directory (config.toml, env.json, summary.json)")
    if (run_dir / "results.json").is_file() and not (run_dir / "summary.json").is_file():
        runs = sorted(p.parent.name for p in run_dir.glob("*/summary.json"))
        raise ConfigError(f"{run_dir}: a `stride bench` directory; re-run one of its runs"
                          + (f", e.g. `stride repro {run_dir / runs[0]}` ({', '.join(runs)})" if runs else ""))
    summary = _read_json(run_dir / "summary.json")
    env = _read_json(run_dir / "env.json")
    cfg_path = run_dir / "config.toml"
    if not cfg_path.is_file():
        raise ConfigError(f"{cfg_path} not found: is {run_dir} a stride run directory?")
    for key in ("params_sha256", "config_hash", "final_train_loss"):
        if key not in summary:
            raise ConfigError(f"{run_dir / 'summary.json'} has no `{key}`: recorded by an older stride?")
    from_caller = [w for k, w in (("model", "a model"), ("data", "data"))
                   if (summary.get("inputs_from") or {}).get(k) == "caller"]
    if from_caller:
        raise ConfigError(f"{run_dir} trained on {' and '.join(from_caller)} passed to Trainer(...) in Python, which "
                          "config.toml does not describe: stride repro re-runs only runs whose config builds them; "
                          "re-run the script that made it")
    cfg = load_config(cfg_path, overrides or [])
    # The run directory's place is not part of the experiment: compare the hash as recorded (before the
    # rerun's own display setting below, which is part of the hash: a run recorded with its progress bar on
    # was reported as a config mismatch).
    hash_match = config_hash(cfg) == summary["config_hash"]
    cfg.metrics.progress = False
    rerun = Path(out) if out is not None else default_rerun_dir(run_dir)
    for steps in (summary.get("checkpoint") or {}).get("extended_from") or []:
        # An extended run (docs/checkpoint.md): replay each earlier segment to its own train.steps first, as the
        # original was trained (the learning-rate schedule of each segment ran over that segment's step count).
        segment = copy.deepcopy(cfg)
        segment.train.steps = int(steps)
        Trainer(config=segment, out=rerun).fit()
    result = Trainer(config=cfg, out=rerun).fit()
    new_env = _read_json(rerun / "env.json")
    lo, ln = float(summary["final_train_loss"]), float(result.summary["final_train_loss"])
    return ReproReport(
        original=run_dir, rerun=rerun, deterministic=bool(cfg.train.deterministic),
        params_match=result.summary["params_sha256"] == summary["params_sha256"],
        loss_original=lo, loss_rerun=ln, loss_rel_diff=_rel_diff(lo, ln), tolerance=tolerance,
        config_hash_match=hash_match, env_diff=env_diff(env, new_env),
    )
