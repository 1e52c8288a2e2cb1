"""stride's per-user cache folder: figures measured once per host (the loader probe, dtype matmul speeds, a
CPU's clock) and the built C kernel, kept between processes so each run does not measure them again.

$STRIDE_CACHE_DIR where set (the test suite points it at a temporary folder), else $XDG_CACHE_HOME/stride,
else ~/.cache/stride.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stride.files.input_file import InputFileError, read_input_text


def user_cache_dir() -> Path:
    if os.environ.get("STRIDE_CACHE_DIR"):
        return Path(os.environ["STRIDE_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stride"


CACHE_MAX_BYTES = 16 << 20  # a cache file holds a few figures per host: hundreds of bytes each


def read_json_cache(path: Path) -> dict[str, Any]:
    """The cache file's object; {} where there is none yet or it is damaged (then it is measured again). A FIFO in
    its place is not read (it blocked every run for ever), nor a file nested too deeply for json (a RecursionError
    traceback) or larger than CACHE_MAX_BYTES."""
    try:
        obj = json.loads(read_input_text(path, limit=CACHE_MAX_BYTES, what="stride cache file"))
    except (InputFileError, ValueError, RecursionError):
        return {}
    return obj if isinstance(obj, dict) else {}


def write_json_cache(path: Path, obj: dict[str, Any]) -> None:
    """Replace the cache file atomically (a reader sees the old file or the new one); a folder that cannot be
    written (a read-only home) leaves the figures to this process alone."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(obj, indent=1))
        tmp.replace(path)
    except OSError:
        pass


@contextlib.contextmanager
def cache_lock(path: Path) -> Iterator[None]:
    """An exclusive lock (flock on `path`.lock) around a read-modify-write of a cache file shared by processes;
    where the folder cannot be written, no lock (the write then fails quietly too)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_suffix(path.suffix + ".lock"), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):  # a file system without flock (Lustre without -o flock): no lock
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
