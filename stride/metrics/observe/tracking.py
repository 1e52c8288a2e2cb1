"""What the experiment trackers (MLflow, Weights & Biases) are given, the same for both.

- parameters: the resolved config, flattened to `section.key` (what config.toml holds);
- metrics: every record the trainer logs (the metrics.jsonl lines, through `on_log`), numbers only,
  nested keys joined with a dot (`breakdown_s.forward`), at the record's step; a validation record's
  `time_s` is named `val_time_s` (one name, one value per step);
- files: summary.json's text as the run folder writes it, and a report of the run where one is there.

Only global rank 0 logs: the trainer logs the same (rank-averaged) record on every rank. A run that
continues from a checkpoint (resumed after a stop, or extended) logs into the tracking runs it logged to
before: their ids are kept in `<run dir>/tracking.json`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch.distributed as dist

from stride.config.loader import config_to_dict
from stride.config.schema import RunConfig
from stride.train.callbacks import TrainerView

REPORT_FILES = ("report.html", "summary.md")  # what `stride report RUN_DIR` writes beside the run's files
STATE = "tracking.json"  # {"mlflow": {...}, "wandb": {...}}: the tracking runs this run folder logs to


def logs_here() -> bool:
    """Global rank 0 (or one process)."""
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def flat_config(cfg: RunConfig) -> dict[str, Any]:
    """{"section.key": value} of the resolved config."""
    return {f"{sec}.{key}": value for sec, keys in config_to_dict(cfg).items() for key, value in keys.items()}


def flat_metrics(rec: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of a metrics.jsonl record (not `step`), nested keys joined with dots; None and text left out."""
    out: dict[str, float] = {}
    for key, value in rec.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_metrics(value, f"{name}."))
        elif isinstance(value, int | float) and not isinstance(value, bool) and name != "step":
            out[name] = float(value)
    return out


def tracked_metrics(rec: Mapping[str, Any]) -> dict[str, float]:
    """`flat_metrics` of a record as the trackers get it: a validation record's clock is `val_time_s`. The
    training record of the same step carries `time_s` too, and two values of one name at one step left a reader
    of MLflow or W&B to guess which was which (outside audit of the sinks); metrics.jsonl keeps `time_s` in both."""
    out = flat_metrics(rec)
    if "val_loss" in rec and "loss" not in rec and "time_s" in out:
        out["val_time_s"] = out.pop("time_s")
    return out


def report_files(run_dir: Path | None) -> list[Path]:
    return [run_dir / name for name in REPORT_FILES if run_dir is not None and (run_dir / name).is_file()]


def missing(package: str, extra: str) -> ImportError:
    return ImportError(f"metrics.{extra} = true needs the {package} package: pip install -e '.[{extra}]' "
                       f"in the stride clone (or pip install {package})")


def earlier_tracking(trainer: TrainerView, tracker: str) -> dict[str, Any]:
    """What `tracker` logged this run to before, when the run continues from a checkpoint ({} otherwise)."""
    run_dir = trainer.run_dir
    if trainer.step == 0 or run_dir is None or not (run_dir.path / STATE).is_file():
        return {}
    try:
        found = json.loads((run_dir.path / STATE).read_text()).get(tracker)
    except (OSError, ValueError, AttributeError, RecursionError):
        return {}
    return found if isinstance(found, dict) else {}


def remember_tracking(trainer: TrainerView, tracker: str, ids: dict[str, Any]) -> None:
    """Keep `tracker`'s run ids in the run folder, for a later continuation of this run."""
    if trainer.run_dir is None:
        return
    state: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError, RecursionError):
        state = json.loads((trainer.run_dir.path / STATE).read_text())
    trainer.run_dir.write_json(STATE, {**(state if isinstance(state, dict) else {}), tracker: ids})
