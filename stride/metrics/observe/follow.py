"""Follow a growing JSONL file (metrics.jsonl, system.jsonl): yield only complete lines, remember where it stopped.

A writer that crashed mid-line (or is mid-write now) leaves a partial last line; it is held back until its newline
arrives, so a half-written record is never parsed as data. The file is read through stride.files.input_file: only a
regular file (a FIFO hung `stride top --once`, a link to /dev/zero grew it to 24 GB, audit 14 M3), in pieces, with a
bound on a line without its newline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stride.files.input_file import InputFileError, InputFileMissing, read_input_range

FOLLOWED_MAX_BYTES = 4 << 30  # metrics.jsonl / system.jsonl: a record is < 1 KiB, so millions of logged steps
LINE_MAX_BYTES = 1 << 20  # one JSON line (a record stride writes is < 1 KiB); a longer one is no record
READ_BYTES = 8 << 20  # a followed file is read in pieces of this size


class JsonlFollower:
    """One followed file (the module docstring says how): at most FOLLOWED_MAX_BYTES, read READ_BYTES at a time, a
    line no longer than LINE_MAX_BYTES without its newline; a line that is not UTF-8 JSON is a ValueError naming the
    file and the line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""
        self._lines = 0  # complete lines read so far: a bad one is named by its line in the file

    def iter_new(self) -> Iterator[Any]:
        """The records appended since the last call (none while the file does not exist yet), one READ_BYTES piece
        of the file at a time (a caller that keeps only the last ones holds no more than a piece's records)."""
        while True:
            try:
                chunk = read_input_range(self.path, self.offset, READ_BYTES, limit=FOLLOWED_MAX_BYTES,
                                         what="run file")
            except InputFileMissing:
                return
            except InputFileError as exc:
                raise ValueError(str(exc)) from None
            if not chunk:
                return
            self.offset += len(chunk)
            yield from self._records(chunk)

    def _records(self, chunk: bytes) -> list[Any]:
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        if len(self._partial) > LINE_MAX_BYTES:
            raise ValueError(f"{self.path}: line {self._lines + len(lines) + 1} runs past {LINE_MAX_BYTES} bytes "
                             "without a newline: not a line stride writes (a record is under 1 KiB)")
        out = []
        first, self._lines = self._lines, self._lines + len(lines)
        for n, line in enumerate(lines, first + 1):
            if not line.strip():
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:  # json.loads said only "'utf-8' codec can't decode byte 0xd7 ..."
                raise ValueError(f"{self.path}: line {n} is not UTF-8 text (byte 0x{line[exc.start]:02x}); stride "
                                 "writes JSON lines in UTF-8: the file is damaged or was not written by stride"
                                 ) from None
            try:
                out.append(json.loads(text))
            except (ValueError, RecursionError) as exc:
                raise ValueError(f"{self.path}: line {n}, a complete line, is not JSON ({exc}): {line[:80]!r}"
                                 ) from None
        return out
