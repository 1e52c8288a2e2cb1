"""A sweep directory: the plan, one result file per finished point, and each point's final state.

    DIR/sweep.json              what is swept: base config, --set, --grid, the points (id, values)
    DIR/points/<id>.json        a finished point's summary and log, written atomically (temporary name,
                                fsync, rename), so a killed sweep leaves complete files or none
    DIR/points/<id>.state.pt    its final model and optimizer state (tensors only), written before the
                                .json: a point whose .json exists can always be exported
    DIR/runs/<id>/              the run directory of a point trained one by one (--pack 1)

A point is finished exactly when its .json parses; resuming skips those and trains the rest. A directory
holding another sweep (other points) is refused rather than mixed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from stride.config import config_hash
from stride.config.errors import ConfigError
from stride.files import strict_json
from stride.metrics.run_dir import atomic_write_text
from stride.sweep.grid import Axis, Point

SCHEMA = "stride.sweep"
VERSION = 1


class SweepStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.points_dir = self.root / "points"

    # -- the plan ------------------------------------------------------------------------------
    def plan(self, config: str | None, overrides: list[str], axes: list[Axis], points: list[Point]) -> dict[str, Any]:
        return {"schema": SCHEMA, "version": VERSION, "config": config, "overrides": list(overrides),
                "grid": [a.text for a in axes], "axes": [{"key": a.key, "values": a.values} for a in axes],
                "points": [{"id": p.id, "values": p.values, "config_hash": config_hash(p.config)} for p in points]}

    def open(self, plan: dict[str, Any]) -> int:
        """Create the directory, or check it holds this sweep; returns how many points are already finished."""
        path = self.root / "sweep.json"
        if path.exists():
            try:
                old = json.loads(path.read_text())
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}: not a stride sweep file ({exc}); use another --out") from None
            mine = [(p["id"], p["config_hash"]) for p in plan["points"]]
            theirs = [(p.get("id"), p.get("config_hash")) for p in old.get("points", [])]
            if old.get("schema") != SCHEMA or mine != theirs:
                raise ConfigError(f"{self.root} holds another sweep (other points or configs); resume it with its own "
                                  "config and --grid, or use another --out")
        self.points_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, strict_json.dumps(plan, indent=2, default=str) + "\n")
        return sum(self.done(p["id"]) for p in plan["points"])

    # -- points ---------------------------------------------------------------------------------
    def result_path(self, pid: str) -> Path:
        return self.points_dir / f"{pid}.json"

    def state_path(self, pid: str) -> Path:
        return self.points_dir / f"{pid}.state.pt"

    def run_dir(self, pid: str) -> Path:
        return self.root / "runs" / pid

    def done(self, pid: str) -> bool:
        return self.read(pid) is not None

    def read(self, pid: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.result_path(pid).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def write(self, pid: str, result: dict[str, Any], state: dict[str, Any] | None) -> None:
        """The point's state (if any), then its result: each atomically, the result last."""
        if state is not None:
            tmp = self.state_path(pid).with_name(f".{pid}.state.pt.tmp-{os.getpid()}")
            torch.save(state, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, self.state_path(pid))
        atomic_write_text(self.result_path(pid), strict_json.dumps(result, indent=1) + "\n")

    def load_state(self, pid: str) -> dict[str, Any]:
        path = self.state_path(pid)
        if not path.is_file() or not self.done(pid):
            raise ConfigError(f"point {pid} has no finished state in {self.points_dir} (not trained yet?)")
        return torch.load(path, map_location="cpu", weights_only=True)

    def results(self, ids: list[str]) -> list[dict[str, Any]]:
        return [r for r in (self.read(i) for i in ids) if r is not None]
