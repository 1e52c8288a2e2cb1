"""The run directory: resolved config, environment, metrics.jsonl, summary.json.

Files that describe a finished state (config, env, summary) are written to a temporary name and
renamed, so a crash never leaves a half-written file that parses as valid.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, TextIO


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self._metrics: TextIO | None = None

    @classmethod
    def create(cls, out_dir: str | Path, name: str, explicit: str | Path | None = None) -> RunDir:
        """`explicit` is the run directory itself (`--out`); else `<out_dir>/<stamp>-<name>`."""
        if explicit is not None:
            return cls(Path(explicit))
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path(out_dir) / f"{stamp}-{name}"
        path, i = base, 1
        while path.exists():
            path, i = Path(f"{base}-{i}"), i + 1
        return cls(path)

    def write_json(self, name: str, obj: Any) -> None:
        atomic_write_text(self.path / name, json.dumps(obj, indent=2, default=_json_default) + "\n")

    def write_text(self, name: str, text: str) -> None:
        atomic_write_text(self.path / name, text)

    def log(self, record: dict[str, Any]) -> None:
        """Append one line to metrics.jsonl (line-buffered: a crash loses at most the last line)."""
        if self._metrics is None:
            self._metrics = open(self.path / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115 (kept open)
        self._metrics.write(json.dumps(record, default=_json_default) + "\n")

    def close(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
