"""The run directory: resolved config, environment, metrics.jsonl, summary.json.

Files that describe a finished state (config, env, summary) are written to a temporary name and
renamed, so a crash never leaves a half-written file that parses as valid. The temporary name is
tagged with this process (stride.files.owner): a write that fails (a full disk) removes it, and a
run folder opened later removes those whose process is gone. The folder is locked for the run's life
(stride.files.run_lock): a second run on it is refused, naming the holder.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any, TextIO

from stride.errors import StrideError, describe_os_error, one_line, os_reason
from stride.files import run_lock
from stride.files.owner import remove_abandoned, tagged_name

_FILE_TMP = re.compile(r"^[A-Za-z0-9_.-]+\.(json|toml|jsonl|html|md)$")  # the rest of a tagged file's name


class RunDirError(StrideError):
    """The run folder cannot be written (a full disk, no permission); the message names the file."""


def atomic_write_text(path: Path, text: str) -> None:
    """Write `path` whole or not at all: a tagged temporary file, fsync, rename; on failure the temporary goes."""
    tmp = path.with_name(tagged_name("tmp", path.name))
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise RunDirError(one_line(f"cannot write {path}: {os_reason(exc)}")) from None


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.mkdir(parents=True, exist_ok=True)
            self._lock: Path | None = run_lock.acquire(path)
        except OSError as exc:
            raise RunDirError(one_line(describe_os_error(exc, path))) from None
        remove_abandoned(path, other_hosts=True, rest=_FILE_TMP)  # temporary files of killed runs (we hold the lock)
        self._metrics: TextIO | None = None

    @classmethod
    def create(cls, out_dir: str | Path, name: str, explicit: str | Path | None = None) -> RunDir:
        """`explicit` is the run directory itself (`--out`); else a new `<out_dir>/<stamp>-<name>[-i]`."""
        if explicit is not None:
            return cls(Path(explicit))
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path(out_dir) / f"{stamp}-{name}"
        path, i = base, 1
        while True:  # mkdir without exist_ok: two runs started in the same second get two folders
            try:
                path.mkdir(parents=True)
                break
            except FileExistsError:
                path, i = Path(f"{base}-{i}"), i + 1
            except OSError as exc:
                raise RunDirError(one_line(describe_os_error(exc, path))) from None
        return cls(path)

    def write_json(self, name: str, obj: Any) -> None:
        atomic_write_text(self.path / name, json.dumps(obj, indent=2, default=_json_default) + "\n")

    def write_text(self, name: str, text: str) -> None:
        atomic_write_text(self.path / name, text)

    def log(self, record: dict[str, Any]) -> None:
        """Append one line to metrics.jsonl (line-buffered: a crash loses at most the last line)."""
        try:
            if self._metrics is None:
                self._metrics = open(self.path / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115 (kept open)
            self._metrics.write(json.dumps(record, default=_json_default) + "\n")
        except OSError as exc:
            raise RunDirError(one_line(f"cannot write {self.path / 'metrics.jsonl'}: {os_reason(exc)}")) from None

    def close(self) -> None:
        if self._metrics is not None:
            with contextlib.suppress(OSError):  # the last line could not be flushed: the disk is full
                self._metrics.close()
            self._metrics = None
        if self._lock is not None:
            run_lock.release(self._lock)
            self._lock = None

    def __del__(self) -> None:  # a run that ended in an exception never called close(): let the folder go
        with contextlib.suppress(Exception):
            self.close()
