"""Checksums of files stride wrote, to tell later whether they changed: a checkpoint's shards (its manifest), a
data store's derived feature caches (their records).

XXH3-128 (the `xxhash` package) detects corruption (a flipped bit, a torn or truncated write); it is not a security
boundary (why this hash, measured: stride.checkpoint.manifest). SHA-256 stays for files recorded with it
(checkpoint format stride-checkpoint/1).
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import xxhash

HASHERS: dict[str, Callable[[], Any]] = {"xxh3_128": xxhash.xxh3_128, "sha256": hashlib.sha256}
_CHUNK = 1 << 23


def checksum_file(path: Path, algo: str = "xxh3_128") -> str:
    """Checksum through a read-only mmap: the hash reads the page cache directly, no copy into a buffer
    (3.0-3.6 GB/s here against 0.8-1.1 GB/s with readinto, 335 MB file, loaded machine)."""
    h = HASHERS[algo]()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                view = memoryview(mm)
                try:
                    for i in range(0, size, _CHUNK):
                        h.update(view[i:i + _CHUNK])
                finally:
                    view.release()
    return h.hexdigest()


def checksum_files(paths: list[Path], algo: str = "xxh3_128") -> list[str]:
    """Checksums of several files in parallel threads (xxhash and hashlib release the GIL on large buffers)."""
    if len(paths) <= 1:
        return [checksum_file(p, algo) for p in paths]
    with ThreadPoolExecutor(max_workers=min(len(paths), os.cpu_count() or 1)) as pool:
        return list(pool.map(lambda p: checksum_file(p, algo), paths))
