"""Message sizes: powers of two (times `factor`) from `min_bytes` to `max_bytes`, like nccl-tests `-b -e -f`."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}
# No buffer can be larger: torch sizes and offsets are int64, so a tensor holds at most 2^63 - 1 bytes (8 EiB).
MAX_BYTES = (1 << 63) - 1
_NUMBER = re.compile(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*")


def parse_bytes(text: str, what: str = "size") -> int:
    """'8', '64K', '1M', '256MB', '1.5K', '1e3' -> bytes (binary units, as nccl-tests' -b/-e: K, M, G).

    nccl-tests reads an integer and a unit; a fraction or a power of ten is taken here where it gives a whole number
    of bytes (1.5K = 1536, 1e3 = 1000) and refused where it does not (0.5, 1.1K): a size is a count of bytes.
    `what` names the option in the messages (`--min-bytes`)."""
    m = _NUMBER.fullmatch(str(text))
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"{what} {text!r}: expected a number of bytes with an optional unit K, M or G "
                         "(e.g. 8, 64K, 1.5M, 1e6)")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation:  # the pattern admits only numbers; kept for safety
        raise ValueError(f"{what} {text!r}: expected a number of bytes") from None
    if number <= 0:
        raise ValueError(f"{what} {text!r}: must be at least 1 byte")
    if number.adjusted() > 30:  # 1e31 and beyond: far past MAX_BYTES in any unit, not worth an exact product
        raise ValueError(f"{what} {text!r}: larger than any buffer can be (at most 2^63 - 1 bytes, 8 EiB)")
    value = number * _UNITS[m.group(2).upper()]
    if value != value.to_integral_value():
        raise ValueError(f"{what} {text!r}: is {value.normalize():f} bytes, not a whole number of bytes")
    n = int(value)
    if n > MAX_BYTES:
        raise ValueError(f"{what} {text!r}: larger than any buffer can be (at most 2^63 - 1 bytes, 8 EiB)")
    return n


def size_ladder(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """The sizes, named in errors by the options that give them (`sizes: need 0 < min (2048) <= max (1024)` named
    neither)."""
    if min_bytes <= 0:
        raise ValueError(f"--min-bytes {min_bytes}: must be at least 1 byte")
    if max_bytes < min_bytes:
        raise ValueError(f"--min-bytes ({min_bytes} B) is above --max-bytes ({max_bytes} B); give a smaller "
                         "--min-bytes or a larger --max-bytes")
    if factor < 2:
        raise ValueError(f"--factor {factor}: must be >= 2 (each size is the one before times --factor)")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out
