"""Welch's t, its degrees of freedom and p-value, the t distribution, Holm and the bootstrap, against known values."""

from __future__ import annotations

import math
import random

import pytest

from stride.sweep.stats import betainc, bootstrap_diff, holm, t_sf, welch


@pytest.mark.parametrize("t, df, expected", [
    (1.0, 1, 0.25),  # Cauchy: 1/2 - atan(t)/pi
    (3.0, 1, 0.5 - math.atan(3.0) / math.pi),
    (1.5, 2, 0.5 - 1.5 / (2 * math.sqrt(2 + 1.5**2))),  # closed form at df = 2
    (-0.7, 2, 0.5 + 0.7 / (2 * math.sqrt(2 + 0.7**2))),
    (0.0, 7.5, 0.5),
])
def test_t_survival_closed_forms(t, df, expected):
    assert t_sf(t, df) == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("t, df, one_sided", [
    (2.228, 10, 0.025), (2.086, 20, 0.025), (2.776, 4, 0.025), (3.169, 10, 0.005), (1.812, 10, 0.05),
    (12.706, 1, 0.025), (1.960, 1e7, 0.025),
])
def test_t_survival_against_printed_tables(t, df, one_sided):
    """Critical values as printed in t tables (3 decimals), so agreement to the table's rounding."""
    assert t_sf(t, df) == pytest.approx(one_sided, rel=2e-3)


def test_against_scipy_where_installed():
    stats = pytest.importorskip("scipy.stats", reason="scipy not installed: the closed forms and tables still run")
    rng = random.Random(5)
    for _ in range(200):
        t, df = rng.uniform(-8, 8), rng.choice([rng.uniform(0.5, 3), rng.uniform(3, 300)])
        assert t_sf(t, df) == pytest.approx(float(stats.t.sf(t, df)), rel=1e-9, abs=1e-14)
    for _ in range(50):
        a, b, x = rng.uniform(0.2, 20), rng.uniform(0.2, 20), rng.random()
        assert betainc(a, b, x) == pytest.approx(float(__import__("scipy.special").special.betainc(a, b, x)),
                                                 rel=1e-9, abs=1e-14)
    a = [rng.gauss(1.0, 0.1) for _ in range(5)]
    b = [rng.gauss(1.1, 0.3) for _ in range(8)]
    w, ref = welch(a, b), stats.ttest_ind(a, b, equal_var=False)
    assert w is not None
    assert (w.t, w.df, w.p) == pytest.approx((ref.statistic, ref.df, ref.pvalue), rel=1e-9)


def test_welch_by_hand():
    a, b = [1.0, 2.0, 3.0], [2.0, 4.0, 6.0, 8.0]
    # means 2 and 5; variances 1 and 20/3; se^2 = 1/3 + 5/3 = 2
    w = welch(a, b)
    assert w is not None
    assert w.diff == -3.0 and w.t == pytest.approx(-3 / math.sqrt(2))
    assert w.df == pytest.approx(4 / ((1 / 3) ** 2 / 2 + (5 / 3) ** 2 / 3))  # Welch-Satterthwaite: 4 / (1/18 + 25/27)
    assert welch([1.0], b) is None  # one seed: no variance, no test


def test_holm_steps_down():
    assert holm([0.01, 0.04, None, 0.03]) == [0.03, 0.06, None, 0.06]
    assert holm([0.5, 0.9]) == [1.0, 1.0]


def test_bootstrap_interval_is_reproducible_and_brackets_the_difference():
    rng = random.Random(1)
    a = [rng.gauss(0.0, 1.0) for _ in range(16)]
    b = [rng.gauss(2.0, 1.0) for _ in range(16)]
    lo, hi = bootstrap_diff(a, b)
    assert (lo, hi) == bootstrap_diff(a, b)
    diff = sum(a) / 16 - sum(b) / 16
    assert lo < diff < hi < 0  # 2 sd apart with 16 seeds each: clearly negative
    same = bootstrap_diff(a, [v + 1e-9 for v in a])
    assert same[0] < 0 < same[1]


def test_one_seed_a_side_gives_no_interval_and_no_claim():
    """One seed resampled to itself: a zero-width interval [x, x] that summary.md printed as if measured."""
    from stride.sweep.report import pairwise, significance_line

    assert bootstrap_diff([1.0], [2.0, 3.0]) is None and bootstrap_diff([1.0, 1.5], [2.0]) is None

    def point(lr: float, seed: int, loss: float) -> dict:
        return {"values": {"optim.lr": lr, "train.seed": seed}, "summary": {"final_val_loss": loss, "status": "done"}}

    (pair,) = pairwise([point(1e-3, 0, 1.0), point(3e-3, 0, 2.0)])
    assert pair["ci95"] is None and pair["p"] is None and pair["significant"] is None
    line = significance_line([pair])
    assert "no claim" in line and "fewer than 2 seeds" in line and "--grid train.seed=0..2" in line
    assert "differ beyond" not in line
    tested = pairwise([point(1e-3, s, 1.0 + s / 100) for s in range(3)] + [point(3e-3, s, 2.0 + s / 100)
                                                                             for s in range(3)])
    assert tested[0]["significant"] is True
    assert significance_line([*tested, pair]) == (
        "1 of 1 configuration pairs differ beyond seed noise; 1 pair(s) not tested: seed noise unknown with fewer "
        "than 2 seeds per configuration; add seeds with --grid train.seed=0..2")
    assert significance_line([]) == "one configuration: no pairs to compare"
