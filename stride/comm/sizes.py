"""Message sizes: powers of two (times `factor`) from `min_bytes` to `max_bytes`, like nccl-tests `-b -e -f`."""

from __future__ import annotations

import re

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_bytes(text: str) -> int:
    """'8', '64K', '1M', '256MB' -> bytes (binary units, as nccl-tests)."""
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"size {text!r}: expected a number with an optional unit K, M or G (e.g. 64K, 256M)")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def size_ladder(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    if min_bytes <= 0 or max_bytes < min_bytes:
        raise ValueError(f"sizes: need 0 < min ({min_bytes}) <= max ({max_bytes})")
    if factor < 2:
        raise ValueError(f"size factor {factor}: must be >= 2")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out
