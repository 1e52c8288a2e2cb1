"""Page-cache hints for a memory-mapped [rows, F] table read as random windows of T rows.

Why: a store that is not in the page cache is read by page faults, one at a time, and on a fault in
a plain mapping the kernel also reads around it (`read_ahead_kb`: 8 MiB on the development box)
although a window is 16 KiB. `plan()` picks by size: a table that fits in half the available memory
is read whole in the background (one sequential read at disk speed, then every window is a hit); a
larger one gets MADV_RANDOM (a fault reads its own pages, not 8 MiB around them: a cold 10 GiB store
read 143 KB from disk per window without it, 18 KB with it) and `will_need(starts, n)`
(MADV_WILLNEED on the pages of the next batches' windows, which the loader asks for while the gather
thread takes major faults), so the disk serves many reads at once instead of one fault after
another. A cached store costs nothing: no fault, no hint.
`release()` (MADV_DONTNEED) unmaps the pages this process has touched: they stay in the page cache
(a later read is a minor fault) but no longer count in the process' RSS, so RSS stays within a
budget whatever the store's size (the mapping is copy-on-write and never written, so nothing is lost).
"""

from __future__ import annotations

import mmap
import os
import resource
import threading

import numpy as np

PAGE = mmap.PAGESIZE


def mem_available_bytes() -> int:
    """MemAvailable from /proc/meminfo (0 where it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return 0


def _read_whole(path: str) -> None:
    """Ask the kernel to read a file into the page cache (sequentially, asynchronously)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)


def file_rss_bytes() -> int:
    """This process' file-backed (and shared) resident bytes: mapped pages of files, the store's included."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[2]) * PAGE


def thread_major_faults() -> int:
    """Major page faults (reads from disk) taken by the calling thread so far."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_majflt


class MappedRows:
    """Hints for the mapping behind an np.memmap of rows (row i at byte i * row_bytes of the file)."""

    def __init__(self, mapped: np.memmap) -> None:
        self._mm: mmap.mmap | None = getattr(mapped, "_mmap", None)
        if self._mm is not None and (mapped.offset != 0 or mapped.ctypes.data % PAGE):
            self._mm = None  # not mapped from byte 0 of the file: offsets below would be wrong
        self.row_bytes, self.nbytes = mapped.strides[0], mapped.nbytes
        self.path = getattr(mapped, "filename", None)
        self.advised_ranges = 0
        self.whole = False  # True once plan() chose to read the whole table

    def plan(self) -> None:
        """Small enough for the page cache (half of MemAvailable): read it whole in the background;
        otherwise MADV_RANDOM, windows' pages asked for ahead by the loader."""
        if self._mm is None:
            return
        if self.path is not None and 0 < self.nbytes <= mem_available_bytes() // 2:
            self.whole = True
            threading.Thread(target=_read_whole, args=(str(self.path),), name="stride-data-readahead",
                             daemon=True).start()
        else:
            self.random()

    @property
    def available(self) -> bool:
        return self._mm is not None

    def random(self) -> None:
        if self._mm is not None:
            self._mm.madvise(mmap.MADV_RANDOM)

    def will_need(self, starts: np.ndarray, n_rows: int) -> None:
        """Start reading the pages of rows starts[i] .. starts[i] + n_rows - 1 (merged into page ranges)."""
        if self._mm is None or not len(starts):
            return
        s = np.sort(np.asarray(starts, dtype=np.int64))
        lo = s * self.row_bytes // PAGE * PAGE
        hi = np.minimum(-(-(s + n_rows) * self.row_bytes // PAGE) * PAGE, self.nbytes)
        # merge ranges that touch or overlap: a new run starts where lo passes every earlier hi
        new = np.ones(len(s), bool)
        new[1:] = lo[1:] > np.maximum.accumulate(hi)[:-1]
        run = np.cumsum(new) - 1
        starts_b = lo[new]
        ends_b = np.maximum.reduceat(hi, np.flatnonzero(new))
        for a, b in zip(starts_b.tolist(), ends_b.tolist(), strict=True):
            self._mm.madvise(mmap.MADV_WILLNEED, a, b - a)
        self.advised_ranges += int(run[-1]) + 1

    def release(self) -> None:
        if self._mm is not None:
            self._mm.madvise(mmap.MADV_DONTNEED)
