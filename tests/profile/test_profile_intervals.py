"""Interval union/intersection against a brute-force boolean timeline on an integer grid."""

from __future__ import annotations

import numpy as np
import pytest

from stride.profile import intervals as iv


def _grid(starts: np.ndarray, ends: np.ndarray, n: int) -> np.ndarray:
    g = np.zeros(n, dtype=bool)
    for s, e in zip(starts, ends, strict=True):
        g[int(s):int(e)] = True
    return g


@pytest.mark.parametrize("seed", range(20))
def test_union_and_intersection_match_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 200
    a_s = rng.integers(0, n - 1, 15).astype(float)
    a_e = np.minimum(a_s + rng.integers(0, 30, 15), n)
    b_s = rng.integers(0, n - 1, 9).astype(float)
    b_e = np.minimum(b_s + rng.integers(0, 50, 9), n)
    a, b = iv.union(a_s, a_e), iv.union(b_s, b_e)
    ga, gb = _grid(a_s, a_e, n), _grid(b_s, b_e, n)
    assert iv.length(a) == ga.sum()
    assert np.all(a[0][1:] > a[1][:-1])  # disjoint, sorted, not touching
    assert iv.length(iv.intersect(a, b)) == (ga & gb).sum()
    assert iv.subtract_length(a, b) == (ga & ~gb).sum()
    assert iv.length(iv.clip(a, 50, 120)) == ga[50:120].sum()


def test_empty_sets() -> None:
    e = iv.union(np.zeros(0), np.zeros(0))
    assert iv.length(e) == 0.0
    assert iv.length(iv.intersect(e, iv.union(np.array([1.0]), np.array([2.0])))) == 0.0
