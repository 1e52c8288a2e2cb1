"""80% intervals from held-out residuals of the same kind of run.

The residual of a development row is r = ln(predicted / measured tokens/s), taken from the fold
where the row's whole source was held out (leave-one-source-out, benchmarks/perfmodel_error.py
--write-intervals). For a new prediction the residuals of its kind (hardware generation,
precision, framework), or of the nearest coarser kind with enough rows, give the 10th and 90th
percentiles q10, q90; since truth = predicted x e^-r:

    tokens/s  in [pred x e^-q90, pred x e^-q10]        iteration time in [t x e^q10, t x e^q90]

(widened to contain the prediction where q10 > 0 or q90 < 0).

A generation no development row ran on gets the leave-one-hardware-out residuals (how wrong the
model is on hardware it never saw), which are wider.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "data" / "perfmodel" / "intervals.json"
MIN_ROWS = 10
# used only when no residual table ships: +-35 % either way, a deliberately wide 80% interval
_FALLBACK = (math.log(0.74), math.log(1.35), 0)


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        raise ValueError("quantile of an empty list")
    k = (len(s) - 1) * q
    lo = int(math.floor(k))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def key(gen: str, prec: str, fw: str) -> str:
    return f"{gen}|{prec}|{fw}"


@dataclass
class IntervalTable:
    groups: dict[str, tuple[float, float, int]] = field(default_factory=dict)  # key -> (q10, q90, n)
    unseen: tuple[float, float, int] = _FALLBACK
    generations: frozenset[str] = frozenset()

    @classmethod
    def from_residuals(cls, rows: list[tuple[tuple[str, str, str], float]],
                       unseen: list[float] | None = None) -> IntervalTable:
        """Quantiles per kind and per coarser kind (`*` wildcards) of (kind, ln(pred/meas)) pairs."""
        buckets: dict[str, list[float]] = {}
        for (gen, prec, fw), r in rows:
            for k in (key(gen, prec, fw), key(gen, prec, "*"), key(gen, "*", "*"), key("*", prec, fw),
                      key("*", prec, "*"), key("*", "*", "*")):
                buckets.setdefault(k, []).append(r)
        groups = {k: (quantile(v, 0.1), quantile(v, 0.9), len(v)) for k, v in buckets.items() if len(v) >= MIN_ROWS}
        un = (quantile(unseen, 0.1), quantile(unseen, 0.9), len(unseen)) if unseen and len(unseen) >= MIN_ROWS \
            else groups.get(key("*", "*", "*"), _FALLBACK)
        return cls(groups, un, frozenset(g for (g, _, _), _ in rows))

    def bounds(self, kind: tuple[str, str, str]) -> tuple[float, float, str]:
        """(q10, q90, which residuals) for a run of `kind`."""
        gen, prec, fw = kind
        if gen not in self.generations:
            return self.unseen[0], self.unseen[1], f"unseen hardware generation ({self.unseen[2]} LOHO residuals)"
        for k in (key(gen, prec, fw), key(gen, prec, "*"), key("*", prec, fw), key(gen, "*", "*"),
                  key("*", prec, "*"), key("*", "*", "*")):
            if k in self.groups:
                q10, q90, n = self.groups[k]
                return q10, q90, f"{k} ({n} LOSO residuals)"
        return _FALLBACK[0], _FALLBACK[1], "no residual table: +-35% default"

    def to_json(self) -> dict:
        return {"groups": {k: list(v) for k, v in sorted(self.groups.items())}, "unseen_hardware": list(self.unseen),
                "generations": sorted(self.generations)}

    @classmethod
    def from_json(cls, data: dict) -> IntervalTable:
        groups = {k: (float(v[0]), float(v[1]), int(v[2])) for k, v in data.get("groups", {}).items()}
        un = data.get("unseen_hardware") or list(_FALLBACK)
        return cls(groups, (float(un[0]), float(un[1]), int(un[2])), frozenset(data.get("generations", [])))


def load_intervals(path: str | Path | None = None) -> IntervalTable:
    """The shipped residual table, or a wide default where the file is missing or unreadable."""
    p = Path(path) if path else DEFAULT_PATH
    try:
        return IntervalTable.from_json(json.loads(p.read_text()))
    except (OSError, ValueError, TypeError, KeyError, IndexError):
        return IntervalTable()


def apply(tokens_per_s: float, iter_time_s: float, q10: float, q90: float) -> dict[str, float]:
    """The 80% interval fields for one prediction; an interval always contains the prediction itself
    (where the residuals of its kind all lean one way, the near end is the prediction)."""
    lo, hi = min(q10, 0.0), max(q90, 0.0)
    return {
        "tokens_per_s_per_gpu_lo": tokens_per_s * math.exp(-hi),
        "tokens_per_s_per_gpu_hi": tokens_per_s * math.exp(-lo),
        "iter_time_s_lo": iter_time_s * math.exp(lo), "iter_time_s_hi": iter_time_s * math.exp(hi),
    }
