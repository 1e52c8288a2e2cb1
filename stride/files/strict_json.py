"""JSON text that every parser reads: non-finite numbers written as null, and where they were.

Python's json module writes NaN and inf as the bare words `NaN` and `Infinity`, which are not JSON
(RFC 8259): JavaScript's JSON.parse, Go, jq, DuckDB and `json.loads(..., parse_constant=...)` refuse
the whole file. A diverged run's loss is exactly such a number, so every JSON file stride writes
(summary.json, metrics.jsonl, results.json, a sweep's point results) goes through `dumps`: a
non-finite float becomes null, and a top-level object lists the dotted paths of those values under
`nonfinite_fields` (null alone would read as "not measured").
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

NONFINITE_KEY = "nonfinite_fields"


def finite_number(v: Any) -> bool:
    """A real, finite number as JSON or TOML gives one: an int or float, not a bool (an int in Python), not NaN or
    infinite. The one test of a numeric field read from a file (summaries, profiles, point files)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def scalar_value(o: Any) -> Any:
    """A tensor's or numpy scalar's Python value (the `default` of the files a run writes)."""
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _clean(obj: Any, path: str, found: list[str], default: Callable[[Any], Any] | None) -> Any:
    if isinstance(obj, float):  # numpy float64 too (a subclass)
        if math.isfinite(obj):
            return obj
        found.append(path or "<value>")
        return None
    if obj is None or isinstance(obj, str | int):  # bool is an int
        return obj
    if isinstance(obj, dict):
        return {k: _clean(v, f"{path}.{k}" if path else str(k), found, default) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v, f"{path}[{i}]", found, default) for i, v in enumerate(obj)]
    if default is not None:  # a tensor or numpy scalar (`.item()`), a Path (`str`): its value, cleaned
        return _clean(default(obj), path, found, default)
    return obj  # json.dumps names the type it cannot write


def finite_json(obj: Any, default: Callable[[Any], Any] | None = scalar_value) -> tuple[Any, list[str]]:
    """`obj` with every non-finite float replaced by None, and the dotted paths replaced (in order)."""
    found: list[str] = []
    return _clean(obj, "", found, default), found


def dumps(obj: Any, *, indent: int | None = None, default: Callable[[Any], Any] | None = scalar_value) -> str:
    """Strict JSON text of `obj`; a dict with non-finite values gets `nonfinite_fields` (merged with one it has)."""
    try:  # the common case, every value finite: json's encoder alone (a metrics.jsonl line: 4.5 us, not 8.5 us)
        return json.dumps(obj, indent=indent, allow_nan=False, default=default)
    except ValueError:
        pass  # a non-finite value somewhere: clean it and list where below
    clean, found = finite_json(obj, default)
    if found and isinstance(clean, dict):
        before = clean.get(NONFINITE_KEY)
        clean[NONFINITE_KEY] = list(dict.fromkeys([*(before if isinstance(before, list) else []), *found]))
    return json.dumps(clean, indent=indent, allow_nan=False)
