"""Axis arithmetic for the report's charts: nice ticks, tick labels, text widths, smoothing.

Ticks step by 1, 2 or 5 times a power of ten (the steps a reader counts in); batch sizes and process
counts, which double, sit on a log2 axis with a tick at each power of two. Text widths are estimated
from per-character advance widths of a typical sans-serif face, rounded up, so a label given the
estimated room never clips (the browser test measures the real boxes).
"""

from __future__ import annotations

import math

FONT = 11  # px, every label but the title
TITLE_FONT = 13

# Advance widths in em, rounded up from common sans-serif faces (Helvetica/Arial/DejaVu Sans).
_NARROW = set("iljI.,:;'|!()[]f t")
_WIDE = set("mwMW@%")


def text_width(s: str, size: float = FONT, bold: bool = False) -> float:
    """Conservative width in px of `s` set in a sans-serif face at `size` px."""
    em = 0.0
    for ch in s:
        if ch in _NARROW:
            em += 0.36
        elif ch in _WIDE:
            em += 0.95
        elif ch.isupper():
            em += 0.75
        else:
            em += 0.64  # digits and lower case: 0.50-0.62 em in the common faces
    return em * size * (1.08 if bold else 1.0) + 2.0


def nice_step(span: float, target: int = 5) -> float:
    """The 1-2-5 x 10^k step that cuts `span` into about `target` intervals."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag * 1.0000001:
            return m * mag
    return 10 * mag


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Ticks covering [lo, hi] with a 1-2-5 step; the axis then runs from the first to the last tick."""
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    step = nice_step(hi - lo, target)
    start, stop = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(k * step, 12) for k in range(start, stop + 1)]


def log2_ticks(lo: float, hi: float) -> list[float]:
    """Powers of two from the one at or below `lo` to the one at or above `hi` (both > 0)."""
    a, b = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    if a == b:
        a, b = a - 1, b + 1
    return [2.0**k for k in range(a, b + 1)]


def tick_labels(ticks: list[float]) -> list[str]:
    """Labels with one scale for the whole axis (k for thousands, M for millions: 8080 -> 8.08k) and as many
    decimals as the step between ticks needs."""
    if not ticks:
        return []
    step = min((b - a for a, b in zip(ticks, ticks[1:], strict=False)), default=abs(ticks[0]) or 1.0)
    top = max(abs(t) for t in ticks)
    div, suffix = next(((d, s) for d, s in ((1e9, "G"), (1e6, "M"), (1e3, "k")) if top >= 10 * d), (1.0, ""))
    return [_decimals(t / div, step / div) + (suffix if t else "") for t in ticks]


def _decimals(v: float, step: float) -> str:
    d = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    s = f"{v:.{d}f}"
    return "0" if s.strip("-0.") == "" else s


def ema(values: list[float], span: int) -> list[float]:
    """Bias-corrected exponential moving average over about `span` points (span 1: the values unchanged)."""
    if span <= 1:
        return list(values)
    alpha = 2 / (span + 1)
    out, acc, norm = [], 0.0, 0.0
    for v in values:
        acc = (1 - alpha) * acc + alpha * v
        norm = (1 - alpha) * norm + alpha
        out.append(acc / norm)  # corrected: early points are not pulled towards 0
    return out


def smoothing_span(n: int) -> int:
    """About a fifth of the curve (at most 51 points), at least 1 (short curves are drawn as logged), odd:
    batch losses on market data are noisy enough that a tenth still shows mostly noise."""
    s = min(51, max(1, n // 5))
    return s if s % 2 else s + 1
