"""Follow a growing JSONL file: yield only complete lines, remember where it stopped.

A writer that crashed mid-line (or is mid-write now) leaves a partial last line; it is held back
until its newline arrives, so a half-written record is never parsed as data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class JsonlFollower:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""

    def read_new(self) -> list[dict[str, Any]]:
        """Records appended since the last call ([] while the file does not exist yet)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        out = []
        for n, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{self.path}: a complete line is not JSON ({exc}): {line[:80]!r} "
                                 f"(line {n + 1} of this read)") from exc
        return out
