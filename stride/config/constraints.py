"""Constraints a schema field declares beside its type (`Annotated[float, Range(gt=0)]`), checked by the loader.

A number's bounds and a string's pattern are a property of the field, like its type and choices, so
they live in `schema.py` with it; `stride config show` and docs/config.md print them from there.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    """Bounds of a number. NaN and inf are refused unless `finite` is False (every float field)."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    finite: bool = True

    def describe(self) -> str:
        """'> 0', '>= 0', 'in (0, 1]', ...: the words an error and the reference use."""
        lo = (self.gt, "(") if self.gt is not None else (self.ge, "[") if self.ge is not None else None
        hi = (self.lt, ")") if self.lt is not None else (self.le, "]") if self.le is not None else None
        if lo and hi:
            return f"in {lo[1]}{_num(lo[0])}, {_num(hi[0])}{hi[1]}"
        if lo:
            return f"{'>' if lo[1] == '(' else '>='} {_num(lo[0])}"
        if hi:
            return f"{'<' if hi[1] == ')' else '<='} {_num(hi[0])}"
        return "finite" if self.finite else "any number"

    def violated(self, value: float) -> str | None:
        """What `value` breaks ('must be > 0', 'is not a finite number'), or None."""
        if self.finite and isinstance(value, float) and not math.isfinite(value):
            bounds = self.describe()
            return "is not a finite number" + (f" (it must be {bounds})" if bounds != "finite" else "")
        ok = ((self.gt is None or value > self.gt) and (self.ge is None or value >= self.ge)
              and (self.lt is None or value < self.lt) and (self.le is None or value <= self.le))
        return None if ok else f"must be {self.describe()}"


FINITE = Range()  # what every float field without its own Range gets


@dataclass(frozen=True)
class Matches:
    """A string that must match `pattern` whole; `expected` says what in words."""

    pattern: str
    expected: str

    def violated(self, value: str) -> str | None:
        return None if re.fullmatch(self.pattern, value) else f"must be {self.expected}"


@dataclass(frozen=True)
class MaxBytes:
    """A string of at most `max` bytes in UTF-8 (a file name's limit counts bytes: an emoji is 4)."""

    max: int
    why: str

    def describe(self) -> str:
        return f"at most {self.max} bytes in UTF-8: {self.why}"

    def violated(self, value: str) -> str | None:
        n = len(value.encode("utf-8", "surrogatepass"))
        return None if n <= self.max else f"is {n} bytes long in UTF-8; it must be {self.describe()}"


@dataclass(frozen=True)
class Length:
    """A list's number of items."""

    min: int = 0
    max: int | None = None

    def describe(self) -> str:
        if self.max == self.min:
            return f"{self.min} item{'s' if self.min != 1 else ''}"
        return f"at least {self.min} item{'s' if self.min != 1 else ''}" + (
            f" and at most {self.max}" if self.max is not None else "")

    def violated(self, value: list) -> str | None:
        n = len(value)
        if n < self.min or (self.max is not None and n > self.max):
            return f"has {n} item{'s' if n != 1 else ''}; it must have {self.describe()}"
        return None


def _num(v: float | None) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)
