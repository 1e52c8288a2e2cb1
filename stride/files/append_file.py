"""Open a run folder's line log (metrics.jsonl, system.jsonl, rollbacks.jsonl) for appending, never through a link.

A resumed run appends to the logs its folder already holds. Where one of them was a symbolic link (a copied or
tampered folder: `metrics.jsonl -> ~/.bashrc`), `open(path, "a")` followed it and wrote the run's lines into the
file it named, outside the folder; a FIFO in its place blocked the run for ever. Both are refused here with an
OSError whose `strerror` says what the entry is, for the caller's one-line error naming the file."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import TextIO


def open_append(path: Path, buffering: int = -1) -> TextIO:
    """`open(path, "a")` for a regular file only: created if missing, a symbolic link or anything else refused."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "it is a symbolic link (a run's log is not written through a link)",
                          str(path)) from None
        if exc.errno == errno.ENXIO:  # a FIFO without a reader, opened without blocking
            raise OSError(errno.ENXIO, "it is a FIFO, not a regular file", str(path)) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "it is not a regular file", str(path))
        if hasattr(os, "O_NONBLOCK"):  # back to blocking writes (no effect on a regular file, said for clarity)
            os.set_blocking(fd, True)
        return open(fd, "a", buffering=buffering, encoding="utf-8")  # noqa: SIM115 (the caller keeps it open)
    except BaseException:
        os.close(fd)
        raise
