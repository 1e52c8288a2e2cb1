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
        self._lines = 0  # complete lines read before this read: a bad one is named by its line in the file

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
        first, self._lines = self._lines, self._lines + len(lines)
        for n, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:  # json.loads said only "'utf-8' codec can't decode byte 0xd7 ..."
                raise ValueError(f"{self.path}: line {first + n + 1} is not UTF-8 text (byte 0x{line[exc.start]:02x}); "
                                 "stride writes JSON lines in UTF-8: the file is damaged or was not written by "
                                 "stride") from None
            try:
                out.append(json.loads(text))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{self.path}: a complete line is not JSON ({exc}): {line[:80]!r} "
                                 f"(line {n + 1} of this read)") from exc
        return out
