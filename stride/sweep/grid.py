"""`--grid key=v1,v2,...` axes, expanded into sweep points, each validated by the ordinary config loader.

A value list is comma-separated TOML literals (`optim.lr=1e-4,3e-4,1e-3`, `optim.betas=[0.9,0.95],[0.9,0.99]`,
`model.loss="mse","huber"`, or bare words); `a..b` is the integers a to b inclusive (`train.seed=0..7`).
Every point is the base config (file, then `--set`) with its grid values set through `stride.config`'s
`set_key` and `validate`, so an unknown key, a wrong type or a bad value is the loader's one-line error,
naming the `--grid` argument it came from.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stride.config import RunConfig, load_config
from stride.config.errors import ConfigError
from stride.config.loader import parse_override, set_key
from stride.config.validate import validate

RANGE = re.compile(r"^\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*$")


@dataclass
class Axis:
    key: str
    values: list[Any]
    text: str  # the --grid argument, for messages


@dataclass
class Point:
    id: str  # stable: a hash of the point's grid values (the same grid gives the same ids)
    values: dict[str, Any]  # grid key -> value
    config: RunConfig

    @property
    def label(self) -> str:
        return " ".join(f"{k}={_show(v)}" for k, v in self.values.items())


def _show(v: Any) -> str:
    return json.dumps(v) if isinstance(v, list | str) else f"{v:g}" if isinstance(v, float) else str(v)


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets and quotes."""
    out, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur))
    return [s.strip() for s in out]


MAX_POINTS = 100_000  # far beyond what one sweep trains; 10^8 points took the memory of the machine to list


def parse_axis(text: str) -> Axis:
    where = f"--grid {text}"
    if "=" not in text:
        raise ConfigError(f"{where}: expected key=v1,v2,... or key=a..b, e.g. --grid optim.lr=1e-4,3e-4")
    key, raw = (s.strip() for s in text.split("=", 1))
    m = RANGE.match(raw)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        if hi < lo:
            raise ConfigError(f"{where}: the range {lo}..{hi} is empty (write the lower end first)")
        if hi - lo + 1 > MAX_POINTS:
            raise ConfigError(f"{where}: the range has {hi - lo + 1:,} values, more than a sweep's "
                              f"{MAX_POINTS:,} points")
        values: list[Any] = list(range(lo, hi + 1))
    else:
        parts = _split_top(raw) if raw else []
        if not parts or any(p == "" for p in parts):
            raise ConfigError(f"{where}: empty grid value list for `{key}`; give at least one value, e.g. {key}=1,2")
        values = [parse_override(f"{key}={p}")[1] for p in parts]
    if len({json.dumps(v, sort_keys=True, default=str) for v in values}) != len(values):
        raise ConfigError(f"{where}: a value appears twice in the grid of `{key}`")
    set_key(load_config(), key, values[0], where)  # an unknown key or a wrong type fails here, named
    return Axis(key, values, text)


def point_id(values: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:12]


def expand(config: str | Path | None, overrides: list[str],
           grid: list[str]) -> tuple[RunConfig, list[Axis], list[Point]]:
    """(base config, axes, points): the cartesian product of the axes over the base config, in axis order."""
    base = load_config(config, overrides)
    if not grid:
        raise ConfigError("no --grid given: a sweep needs at least one axis, e.g. --grid train.seed=0..3")
    axes = [parse_axis(g) for g in grid]
    seen: set[str] = set()
    for a in axes:
        if a.key in seen:
            raise ConfigError(f"--grid {a.text}: `{a.key}` has two --grid axes; give its values in one")
        seen.add(a.key)
    n = math.prod(len(a.values) for a in axes)
    if n > MAX_POINTS:  # each point is a config in memory and a run to train: refused before any is built
        raise ConfigError(f"--grid {' '.join(a.text for a in axes)}: {n:,} points, more than a sweep's "
                          f"{MAX_POINTS:,}; split it into several sweeps")
    points = []
    for combo in itertools.product(*(a.values for a in axes)):
        cfg = copy.deepcopy(base)
        values = {}
        for a, v in zip(axes, combo, strict=True):
            set_key(cfg, a.key, v, f"--grid {a.text}")
            values[a.key] = v
        try:
            validate(cfg)
        except ConfigError as exc:
            raise ConfigError(f"--grid point {' '.join(f'{k}={_show(v)}' for k, v in values.items())}: {exc}") from None
        points.append(Point(point_id(values), values, cfg))
    return base, axes, points
