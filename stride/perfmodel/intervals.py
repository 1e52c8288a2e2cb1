"""80% intervals from held-out residuals of the same kind of run.

The residual of a development row is r = ln(predicted / measured tokens/s), taken from the fold
where the row's whole source was held out (leave-one-source-out, benchmarks/perfmodel_error.py
--write-intervals). For a new prediction the residuals of its kind (hardware generation,
precision, framework), or of the nearest coarser kind with enough rows, give the 10th and 90th
percentiles q10, q90; since truth = predicted x e^-r:

    tokens/s  in [pred x e^-q90, pred x e^-q10]        iteration time in [t x e^q10, t x e^q90]

(widened to contain the prediction where q10 > 0 or q90 < 0).

A generation no development row ran on gets the leave-one-hardware-out residuals (how wrong the
model is on hardware it never saw), widened where needed to the widest interval its kind of run gets on
any part the model has seen: an unseen part is never given a narrower interval than a seen one; a MoE
run on such hardware too (the MoE rows alone are too few to hold out by generation).

A mixture-of-experts run looks first among the residuals of MoE runs alone (keys `moe:gen|prec|fw` and
coarser), where enough sources back them: the model's MoE error is several times its dense error (LOSO
median 26 % against 9-11 %), so a MoE row given the spread of its dense neighbours got an interval far too
narrow (round 11's blind MoE rows: 47 % inside their 80 % intervals). Dense runs' intervals are as before.

Memory: one interval for every run, from the development rows that measure memory (ln(predicted / measured) of
the kind they measured, each predicted by the fold that held its source out; every source weighs the same). The
model errs both ways and leans low (a plan's real peak is up to 1.7x the predicted one at the 80% upper end), so
`stride plan` shows where a plan is clear of the device's memory even at that end.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "data" / "perfmodel" / "intervals.json"
MIN_ROWS = 10
# A kind's residuals give its own interval only when at least this many sources back them: a new source's systematic
# error is one draw from the spread between sources, which one to three sources cannot estimate (their rows fall
# through to the coarser kind). Chosen on the blind rounds: 80 % intervals held 67 % of round 9's 147 unseen rows with
# any number of sources, 80 % with four, the development set's leave-one-source-out 82 % and 79 % (docs/perfmodel.md).
MIN_SOURCES = 4
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


def weighted_quantile(pts: list[tuple[float, float]], q: float) -> float:
    """Quantile of (value, weight) points: the value where the cumulative weight first reaches q."""
    s = sorted(pts)
    total = sum(w for _, w in s)
    if not s or total <= 0:
        raise ValueError("quantile of an empty list")
    acc = 0.0
    for v, w in s:
        acc += w
        if acc >= q * total - 1e-12:
            return v
    return s[-1][0]


# Student t 90th percentiles for 1..10 degrees of freedom; z for infinitely many
_T90 = (3.078, 1.886, 1.638, 1.533, 1.476, 1.440, 1.415, 1.397, 1.383, 1.372)
_Z90 = 1.2816


def small_sample_widening(n_sources: int) -> float:
    """How much wider a prediction interval must be when the spread is estimated from n sources
    (t over z at 90%, n - 1 degrees of freedom): a new source's systematic error is one more draw."""
    df = max(1, n_sources - 1)
    return (_T90[df - 1] if df <= len(_T90) else _Z90 + (_Z90**3 + _Z90) / (4 * df)) / _Z90


def spread(residuals: list[tuple[float, str]], by_source: bool) -> tuple[float, float]:
    """(q10, q90) of (residual, source) pairs; `by_source`: every source weighs the same and the range is widened
    around the median by t/z for the number of sources (a new source's systematic error is one more draw)."""
    per: dict[str, int] = {}
    for _, src in residuals:
        per[src] = per.get(src, 0) + 1
    pts = [(r, 1.0 / per[src]) for r, src in residuals]
    lo, mid, hi = (weighted_quantile(pts, q) for q in (0.1, 0.5, 0.9))
    f = small_sample_widening(len(per)) if by_source else 1.0
    return mid - f * (mid - lo), mid + f * (hi - mid)


def key(gen: str, prec: str, fw: str) -> str:
    return f"{gen}|{prec}|{fw}"


MOE = "moe:"  # the prefix of the keys of MoE runs' own residuals


def _chain(kind: tuple[str, ...]) -> tuple[str, ...]:
    """The keys a run of this kind looks in, finest first: a MoE run's own (`moe:`) keys, then the dense ones. Its
    residual counts under every one of them."""
    gen, prec, fw = kind[:3]
    dense = (key(gen, prec, fw), key(gen, prec, "*"), key("*", prec, fw), key(gen, "*", "*"), key("*", prec, "*"),
             key("*", "*", "*"))
    return tuple(MOE + k for k in dense) + dense if kind[3:] == ("moe",) else dense


@dataclass
class IntervalTable:
    groups: dict[str, tuple[float, float, int]] = field(default_factory=dict)  # key -> (q10, q90, n)
    unseen: tuple[float, float, int] = _FALLBACK
    generations: frozenset[str] = frozenset()
    # ln(predicted / measured peak memory): (q10, q90, rows, sources); None: not measured
    memory: tuple[float, float, int, int] | None = None

    @classmethod
    def from_residuals(cls, rows: list[tuple[tuple[str, ...], float]], unseen: list[float] | None = None,
                       sources: list[str] | None = None) -> IntervalTable:
        """Quantiles per kind and per coarser kind (`*` wildcards) of (kind, ln(pred/meas)) pairs; a kind of
        four parts whose last is "moe" also counts under the `moe:` keys (see the module's text).

        With `sources` (one per row), every source weighs the same inside a kind (a source's error is
        one draw of the systematic error a new source brings, however many rows it has), and the
        10-90% range is widened around the median by t/z for the number of sources it rests on."""
        buckets: dict[str, list[tuple[float, str]]] = {}
        srcs = sources or [str(i) for i in range(len(rows))]
        for (kind, r), src in zip(rows, srcs, strict=True):
            for k in _chain(kind):
                buckets.setdefault(k, []).append((r, src))
        groups = {}
        for k, v in buckets.items():
            if len(v) < MIN_ROWS:
                continue
            n_sources = len({src for _, src in v})
            if sources and n_sources < MIN_SOURCES and k != key("*", "*", "*"):
                continue
            groups[k] = (*spread(v, bool(sources)), len(v))
        un = (quantile(unseen, 0.1), quantile(unseen, 0.9), len(unseen)) if unseen and len(unseen) >= MIN_ROWS \
            else groups.get(key("*", "*", "*"), _FALLBACK)
        return cls(groups, un, frozenset(kind[0] for kind, _ in rows))

    def with_memory(self, residuals: list[tuple[float, str]]) -> IntervalTable:
        """This table with the memory interval of (ln(predicted / measured memory), source) pairs, weighted and
        widened by source as the throughput groups; none from fewer than MIN_ROWS rows or MIN_SOURCES sources."""
        n_sources = len({src for _, src in residuals})
        if len(residuals) < MIN_ROWS or n_sources < MIN_SOURCES:
            return dataclasses.replace(self, memory=None)
        return dataclasses.replace(self, memory=(*spread(residuals, True), len(residuals), n_sources))

    def memory_factors(self) -> tuple[float, float, str] | None:
        """(lo, hi) multipliers of a predicted peak for its 80% interval (truth = predicted x e^-r), and their basis;
        None where the table has no memory residuals."""
        if self.memory is None:
            return None
        q10, q90, n, n_sources = self.memory
        return (math.exp(-max(q90, 0.0)), math.exp(-min(q10, 0.0)),
                f"{n} published runs that measured memory, {n_sources} sources, each predicted with its source "
                "held out")

    def bounds(self, kind: tuple[str, ...]) -> tuple[float, float, str]:
        """(q10, q90, which residuals) for a run of `kind` ((generation, precision, framework[, "moe"]))."""
        if kind[0] not in self.generations:
            # how wrong the model is on a part it never saw (LOHO), and never narrower than the spread its kind of
            # run has on the parts it did see: a pooled LOHO range narrower than a seen part's own (Gaudi 3 at
            # 0.84-1.24x the hours where H100 Megatron runs get 0.75-1.60x) read as the safer bet
            q10, q90, n = self.unseen
            seen = [next((k for k in _chain((gen, *kind[1:])) if k in self.groups), None) for gen in self.generations]
            seen = sorted({k for k in seen if k is not None})
            if not seen:
                return q10, q90, f"unseen hardware generation ({n} LOHO residuals)"
            lo, hi = min(self.groups[k][0] for k in seen), max(self.groups[k][1] for k in seen)
            return (min(q10, lo), max(q90, hi),
                    f"unseen hardware generation ({n} LOHO residuals), at least as wide as on any seen part")
        for k in _chain(kind):
            if k in self.groups:
                q10, q90, n = self.groups[k]
                # a part seen, but not in this kind of run: the residuals are every part's, said so (MI300X's
                # "*|16-bit|megatron (64 LOSO residuals)" read as MI300X's own to an outside audit of the planner)
                other = k.split("|", 1)[0] == "*" and kind[0] != "*"
                note = f"; no {kind[0]} rows of this kind: every part's" if other else ""
                return q10, q90, f"{k} ({n} LOSO residuals{note})"
        return _FALLBACK[0], _FALLBACK[1], "no residual table: +-35% default"

    def to_json(self) -> dict:
        return {"groups": {k: list(v) for k, v in sorted(self.groups.items())}, "unseen_hardware": list(self.unseen),
                "generations": sorted(self.generations),
                **({"memory": list(self.memory)} if self.memory is not None else {})}

    @classmethod
    def from_json(cls, data: dict) -> IntervalTable:
        groups = {k: (float(v[0]), float(v[1]), int(v[2])) for k, v in data.get("groups", {}).items()}
        un = data.get("unseen_hardware") or list(_FALLBACK)
        m = data.get("memory")
        memory = (float(m[0]), float(m[1]), int(m[2]), int(m[3])) if m else None
        return cls(groups, (float(un[0]), float(un[1]), int(un[2])), frozenset(data.get("generations", [])), memory)


def load_intervals(path: str | Path | None = None) -> IntervalTable:
    """The shipped residual table, or a wide default where the file is missing or unreadable."""
    p = Path(path) if path else DEFAULT_PATH
    try:
        return IntervalTable.from_json(json.loads(p.read_text()))
    except (OSError, ValueError, TypeError, KeyError, IndexError):
        return IntervalTable()


def run_kind(generation: str, precision: str, framework: str, moe: bool = False) -> tuple[str, ...]:
    """The kind a run's residuals are grouped by: (generation, precision, framework), bf16 and fp16 as one; a
    mixture-of-experts run adds "moe"."""
    precision = "fp32" if precision == "tf32" else precision  # fp32 storage either way
    kind = (generation, precision if precision in ("fp8", "fp4", "fp32") else "16-bit", framework)
    return (*kind, "moe") if moe else kind


def time_factors(q10: float, q90: float) -> tuple[float, float]:
    """(lo, hi) multipliers of a predicted time (step, hours) for its 80% interval; they bracket 1, so an
    interval always contains the prediction itself (where the residuals of its kind all lean one way, the near
    end is the prediction). A rate (tokens/s) divides by them: its lo is rate / hi."""
    return math.exp(min(q10, 0.0)), math.exp(max(q90, 0.0))


def apply(tokens_per_s: float, iter_time_s: float, q10: float, q90: float) -> dict[str, float]:
    """The 80% interval fields for one prediction (see `time_factors`)."""
    lo, hi = time_factors(q10, q90)
    return {
        "tokens_per_s_per_gpu_lo": tokens_per_s / hi, "tokens_per_s_per_gpu_hi": tokens_per_s / lo,
        "iter_time_s_lo": iter_time_s * lo, "iter_time_s_hi": iter_time_s * hi,
    }
