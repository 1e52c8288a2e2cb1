"""Interval arithmetic on numpy arrays: union, total length, intersection, difference, clipping.

Every breakdown here is a length of a union of intervals, so nesting (an operator inside another)
and concurrency (kernels on several streams) are never double-counted.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]  # (starts, ends), merged: sorted and disjoint


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge possibly overlapping [start, end) intervals into sorted disjoint ones (touching ones join)."""
    if len(starts) == 0:
        return np.zeros(0), np.zeros(0)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    out_e = np.maximum.reduceat(e, idx) if len(idx) else e
    return out_s, out_e


def length(iv: Intervals) -> float:
    return float(np.sum(iv[1] - iv[0])) if len(iv[0]) else 0.0


def clip(iv: Intervals, lo: float, hi: float) -> Intervals:
    """The part of merged intervals inside [lo, hi) (binary search first: O(log n + k))."""
    a = int(np.searchsorted(iv[1], lo, side="right"))
    b = int(np.searchsorted(iv[0], hi, side="left"))
    s, e = np.maximum(iv[0][a:b], lo), np.minimum(iv[1][a:b], hi)
    keep = e > s
    return s[keep], e[keep]


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two merged interval sets (sweep over both; O(n + m))."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return np.zeros(0), np.zeros(0)
    # Candidate pairs: for each a-interval, the b-intervals that can overlap it.
    lo = np.searchsorted(b[1], a[0], side="right")
    hi = np.searchsorted(b[0], a[1], side="left")
    counts = np.maximum(hi - lo, 0)
    if counts.sum() == 0:
        return np.zeros(0), np.zeros(0)
    ai = np.repeat(np.arange(len(a[0])), counts)
    offs = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    bi = np.repeat(lo, counts) + offs
    s = np.maximum(a[0][ai], b[0][bi])
    e = np.minimum(a[1][ai], b[1][bi])
    keep = e > s
    return s[keep], e[keep]


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """a \\ b for merged sets, as a merged set: a intersected with the gaps of b."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return a
    gaps = (np.concatenate([[-np.inf], b[1]]), np.concatenate([b[0], [np.inf]]))
    return intersect(a, gaps)


def subtract_length(a: Intervals, b: Intervals) -> float:
    """|a \\ b| for merged sets."""
    return length(a) - length(intersect(a, b))
