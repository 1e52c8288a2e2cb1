"""What this host has room for: its available memory, and byte counts as people read them.

Here, below every package that checks room before it allocates (`stride train`'s memory check, `stride data synth`'s
day), so each reads the host through one function and says sizes alike; psutil is its one import beyond the standard
library (imported when called)."""

from __future__ import annotations


def available_memory_bytes() -> int:
    """Bytes of host memory available now (MemAvailable: free plus reclaimable cache), as `stride comm` reads it."""
    import psutil

    return int(psutil.virtual_memory().available)


def binary_size(n: int | float) -> str:
    """Bytes in binary units: '74.5 GiB'; beyond EiB as a power of ten of EiB."""
    if n < 1024:
        return f"{int(n)} B"
    v = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        v /= 1024
        if v < 1024 or unit == "EiB":
            break
    return f"{v:.3g} {unit}"
