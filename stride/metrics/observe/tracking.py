"""What the experiment trackers (MLflow, Weights & Biases) are given, the same for both.

- parameters: the resolved config, flattened to `section.key` (what config.toml holds);
- metrics: every record the trainer logs (the metrics.jsonl lines, through `on_log`), numbers only,
  nested keys joined with a dot (`breakdown_s.forward`), at the record's step;
- files: summary.json's text as the run folder writes it, and a report of the run where one is there.

Only global rank 0 logs: the trainer logs the same (rank-averaged) record on every rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch.distributed as dist

from stride.config.loader import config_to_dict
from stride.config.schema import RunConfig

REPORT_FILES = ("report.html", "summary.md")  # what `stride report RUN_DIR` writes beside the run's files


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


def report_files(run_dir: Path | None) -> list[Path]:
    return [run_dir / name for name in REPORT_FILES if run_dir is not None and (run_dir / name).is_file()]


def missing(package: str, extra: str) -> ImportError:
    return ImportError(f"metrics.{extra} = true needs the {package} package: pip install 'stride[{extra}]' "
                       f"(or pip install {package})")
