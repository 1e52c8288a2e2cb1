"""Follow a growing JSONL file (metrics.jsonl, system.jsonl): yield only complete lines, remember where it stopped.

A writer that crashed mid-line (or is mid-write now) leaves a partial last line; it is held back until its newline
arrives, so a half-written record is never parsed as data. The file is read through stride.files.input_file: only a
regular file (a FIFO hung `stride top --once`, a link to /dev/zero grew it to 24 GB, audit 14 M3), in pieces, with a
bound on a line without its newline.

A followed file can be rewritten: a resume replaces metrics.jsonl with the records up to its checkpoint's step
(an atomic rename, a new inode) and logs the later steps again. Reading on from the old byte offset read the
middle of a line ("a complete line, is not JSON", audit 16 M4), or, on a line boundary, skipped the new records in
silence. So a new inode, a file shorter than the offset, or bytes before the offset that are not the ones read
there (rewritten in place and grown past it) start the reading over from byte 0, and `iter_new` yields STARTED_OVER
first: its consumer drops the records it holds, which the file no longer has.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stride.files.input_file import InputFileError, InputFileMissing, open_input_file

FOLLOWED_MAX_BYTES = 4 << 30  # metrics.jsonl / system.jsonl: a record is < 1 KiB, so millions of logged steps
LINE_MAX_BYTES = 1 << 20  # one JSON line (a record stride writes is < 1 KiB); a longer one is no record
READ_BYTES = 8 << 20  # a followed file is read in pieces of this size
TAIL_BYTES = 64  # the last bytes read, compared again at the next read: a rewrite in place that grew past the offset


class StartedOver:
    """Yielded by `iter_new` before the records of a file read again from byte 0 (it was replaced or rewritten):
    the records yielded before are not in the file any more."""

    def __repr__(self) -> str:
        return "STARTED_OVER"


STARTED_OVER = StartedOver()


class JsonlFollower:
    """One followed file (the module docstring says how): at most FOLLOWED_MAX_BYTES, read READ_BYTES at a time, a
    line no longer than LINE_MAX_BYTES without its newline; a line that is not UTF-8 JSON is a ValueError naming the
    file and the line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""
        self._lines = 0  # complete lines read so far: a bad one is named by its line in the file
        self._file: tuple[int, int] | None = None  # (st_dev, st_ino) of the file read so far
        self._tail = b""  # its last bytes before `offset`, as read

    def iter_new(self) -> Iterator[Any]:
        """The records appended since the last call (none while the file does not exist yet), one READ_BYTES piece
        of the file at a time (a caller that keeps only the last ones holds no more than a piece's records). A file
        replaced or rewritten since (module docstring) is read again from byte 0, after one STARTED_OVER."""
        while True:
            try:
                chunk = self._read()
            except InputFileMissing:
                return
            except InputFileError as exc:
                raise ValueError(str(exc)) from None
            if chunk is None:
                self.offset, self._partial, self._lines, self._tail = 0, b"", 0, b""
                yield STARTED_OVER
                continue
            if not chunk:
                return
            self.offset += len(chunk)
            self._tail = (self._tail + chunk)[-TAIL_BYTES:]
            yield from self._records(chunk)

    def _read(self) -> bytes | None:
        """The next piece from `offset` on; None where the file is not the one read so far (then nothing is read)."""
        with open_input_file(self.path, limit=FOLLOWED_MAX_BYTES, what="run file") as f:
            try:
                st = os.fstat(f.fileno())
                same = self._file in (None, (st.st_dev, st.st_ino)) and st.st_size >= self.offset
                if same and self._tail:
                    f.seek(self.offset - len(self._tail))
                    same = f.read(len(self._tail)) == self._tail
                if not same:
                    self._file = None
                    return None
                self._file = (st.st_dev, st.st_ino)
                f.seek(self.offset)
                return f.read(READ_BYTES)
            except OSError as exc:
                raise InputFileError(f"run file {self.path}: cannot read it: {exc.strerror or exc}", self.path
                                     ) from None

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
