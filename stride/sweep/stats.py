"""Is configuration A better than B, or is the difference seed noise? Welch's t and an interval of the difference.

Each configuration's seeds are independent samples of its final validation loss. Welch's t-test compares
their means without assuming equal variances (seed spread differs between, e.g., learning rates), with
the Welch-Satterthwaite degrees of freedom; the two-sided p-value comes from Student's t distribution
(scipy's when it is installed, else `t_sf` below). The 95 % interval of the difference of means is, with
fewer than `BOOTSTRAP_MIN_SEEDS` seeds on a side (every sweep in practice), Welch's t interval: diff +-
t_{0.975, Welch df} x SE from the same computation as p, so it excludes 0 exactly when the raw p < 0.05.
With that many seeds a side it is the percentile bootstrap (each configuration's seeds resampled with
replacement, fixed seed: the same results give the same interval), which assumes no distribution but
covers far less than 95 % with few seeds (figures at `BOOTSTRAP_MIN_SEEDS`). With many pairs some will
look significant by chance: Holm's step-down adjustment of the p-values over all pairs of a sweep controls that.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

# how a sweep gets seed replicates: each configuration needs 2 or more seeds for its seed noise to be estimated
MORE_SEEDS = "--grid train.seed=0..2"

# Seeds needed on each side before the interval is the percentile bootstrap rather than Welch's t interval.
# The percentile bootstrap's real coverage of its nominal 95 % is far short with few seeds: with 2 values a
# side it is exactly [min(a) - max(b), max(a) - min(b)]. Measured on normal samples, true difference 0, 4000
# trials each (4000 resamples, as in `bootstrap_diff`), equal sd / b's sd 3x a's:
#   n a side   2     3     4     5     6     8     10    15    20    25    30    40
#   bootstrap  .656  .809  .864  .875  .897  .906  .911  .921  .934  .943  .943  .947  (sd 3x: .616 .766 .833
#              .851 .876 .894 .904 .919 .933)
#   Welch t    .973  .968  .962  .952  .956  .951  .948  .940  .948  .952  .954  .953  (sd 3x: .964 .951 .952
#              .949 .953 .950 .945 .946 .948)
# (+-0.007 at 95 % from the trials). The bootstrap is within about a point of 95 % only from 25 seeds a side.
BOOTSTRAP_MIN_SEEDS = 25
WELCH_T, BOOTSTRAP = "welch_t", "percentile_bootstrap"  # the interval's method, as results.json names it


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified Lentz, as in Numerical Recipes)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = tiny if abs(d) < tiny else d
    d = 1.0 / d
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = tiny if abs(d) < tiny else d
        c = 1.0 + aa / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = tiny if abs(d) < tiny else d
        c = 1.0 + aa / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            return h
    raise ArithmeticError(f"incomplete beta: no convergence for a={a}, b={b}, x={x}")


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc: x = {x} is not in [0, 1]")
    if x in (0.0, 1.0):
        return x
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln_front)
    if x < (a + 1.0) / (a + b + 2.0):  # the continued fraction converges fast on this side
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` > 0 degrees of freedom (df may be fractional, as Welch's is)."""
    if df <= 0 or math.isnan(df):
        raise ValueError(f"t distribution needs df > 0, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))  # P(|T| > |t|) / 2
    return tail if t >= 0 else 1.0 - tail


def _two_sided_p(t: float, df: float) -> float:
    try:
        from scipy.stats import t as student_t
    except ImportError:
        return min(1.0, 2.0 * t_sf(abs(t), df))
    return float(min(1.0, 2.0 * student_t.sf(abs(t), df)))


def t_ppf(q: float, df: float) -> float:
    """Quantile of Student's t (scipy's when installed, else `t_sf` inverted by bisection) for the interval's
    critical value, so the interval and p come from the same distribution."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"t quantile needs 0 < q < 1, got {q}")
    try:
        from scipy.stats import t as student_t
    except ImportError:
        pass
    else:
        return float(student_t.ppf(q, df))
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    tail, lo, hi = 1.0 - q, 0.0, 1.0
    while t_sf(hi, df) > tail:  # t_sf falls with t: bracket the quantile, then halve
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if t_sf(mid, df) > tail else (lo, mid)
    return 0.5 * (lo + hi)


@dataclass
class Welch:
    diff: float  # mean(a) - mean(b)
    t: float
    df: float
    p: float  # two-sided
    se: float  # standard error of diff: sqrt(var(a)/n_a + var(b)/n_b)


def _mean_var(xs: list[float]) -> tuple[float, float] | None:
    """Mean and sample variance of 2 or more values, either inf where it is past the float range; None when a value
    is not finite. `statistics.variance` raised OverflowError ("integer division result too large for a float") on
    values near 1e308 (audit, #1) and `fmean` raises on a sum past the range: where they overflow, the values are
    scaled by the largest magnitude, so a mean or variance that fits a float is still found."""
    if not all(math.isfinite(x) for x in xs):
        return None
    try:
        return statistics.fmean(xs), statistics.variance(xs)
    except OverflowError:
        scale = max(abs(x) for x in xs)
        ys = [x / scale for x in xs]
        return statistics.fmean(ys) * scale, statistics.variance(ys) * scale * scale  # float products: inf, no raise


def mean_sd(xs: list[float]) -> tuple[float | None, float | None]:
    """Mean and sample sd (None with fewer than 2 values) of `xs`, never raising on finite inputs: a mean or sd past
    the float range is None (no figure) rather than an OverflowError from `statistics`."""
    if len(xs) < 2:
        return (xs[0] if xs and math.isfinite(xs[0]) else None), None
    mv = _mean_var(xs)
    if mv is None:
        return None, None
    mean, var = mv
    return (mean if math.isfinite(mean) else None), (math.sqrt(var) if math.isfinite(var) else None)


def _moments(a: list[float], b: list[float]) -> tuple[float, float, float, float] | None:
    """mean(a), var(a) / n_a, mean(b), var(b) / n_b: Welch's terms; None with fewer than 2 values on a side or a
    value that is not finite."""
    if len(a) < 2 or len(b) < 2:
        return None
    ma_va, mb_vb = _mean_var(a), _mean_var(b)
    if ma_va is None or mb_vb is None:
        return None
    (ma, va), (mb, vb) = ma_va, mb_vb
    return ma, va / len(a), mb, vb / len(b)


def no_seed_spread(a: list[float], b: list[float]) -> bool:
    """Whether neither side's seeds spread in a way a float holds: Welch's squared standard error var(a)/n_a +
    var(b)/n_b is 0 (identical results, or differences whose squares underflow, as 0, 0, 3e-162). A t-test would
    claim certainty there (t = inf, p = 0) where seed noise is unknown. The one test of this fact: `welch` gives no
    test and the sweep report says why (stride.sweep.report.IDENTICAL). Two checks of their own disagreed: the
    report's sd == 0 on both sides, welch's sum == 0; for 0, 0, 3e-162 against 1, 1, 1 the sd is 2e-162, not 0, but
    its variance 5e-324 over 3 seeds is, and the report called the pair's losses "too large for the test"."""
    m = _moments(a, b)
    return m is not None and m[1] + m[3] == 0


def welch(a: list[float], b: list[float]) -> Welch | None:
    """Welch's unequal-variance t-test of mean(a) = mean(b); None with fewer than 2 values on a side, where both
    sides' seeds gave identical results (`no_seed_spread`: seed noise unknown, not certainty; it was t = inf,
    p = 0 and a zero-width interval), or where the figures do not fit a float (extreme values)."""
    m = _moments(a, b)
    if m is None or no_seed_spread(a, b):
        return None
    ma, va, mb, vb = m
    diff = ma - mb
    se2 = va + vb  # > 0: no_seed_spread is this sum == 0
    if not all(map(math.isfinite, (ma, mb, diff, se2))):
        return None
    t = diff / math.sqrt(se2)
    # Welch-Satterthwaite, in variances scaled by the larger one: the formula is scale-free, and squaring raw
    # variances underflowed to 0 / 0 for seed spreads below ~1e-81 (a real difference then got no test) and overflowed
    # to inf above ~1e77
    scale = max(va, vb)
    ra, rb = va / scale, vb / scale
    df = (ra + rb) ** 2 / (ra * ra / (len(a) - 1) + rb * rb / (len(b) - 1))
    if not (math.isfinite(t) and math.isfinite(df) and df > 0):
        return None
    return Welch(diff, t, df, _two_sided_p(t, df), math.sqrt(se2))


def welch_interval(w: Welch, level: float = 0.95) -> tuple[float, float]:
    """Welch's t interval diff +- t_{(1+level)/2, df} x SE: with `level` 0.95 it excludes 0 exactly when w.p <
    0.05, and it keeps close to its nominal coverage down to 2 seeds a side (see BOOTSTRAP_MIN_SEEDS)."""
    half = t_ppf((1.0 + level) / 2.0, w.df) * w.se
    return w.diff - half, w.diff + half


def bootstrap_diff(a: list[float], b: list[float], level: float = 0.95, resamples: int = 4000,
                   seed: int = 0) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of mean(a) - mean(b), each side resampled with replacement; None with fewer
    than 2 values on a side (one value resamples to itself: a zero-width interval that claims no noise)."""
    if len(a) < 2 or len(b) < 2:
        return None
    rng = random.Random(seed)
    na, nb = len(a), len(b)
    diffs = sorted(statistics.fmean(rng.choices(a, k=na)) - statistics.fmean(rng.choices(b, k=nb))
                   for _ in range(resamples))
    return diffs[int((1 - level) / 2 * (resamples - 1))], diffs[int((1 + level) / 2 * (resamples - 1))]


def diff_interval(a: list[float], b: list[float], level: float = 0.95) -> tuple[tuple[float, float], str] | None:
    """Interval of mean(a) - mean(b) and its method (WELCH_T or BOOTSTRAP): the bootstrap only with
    BOOTSTRAP_MIN_SEEDS or more a side, where its coverage is near nominal; None with fewer than 2 a side."""
    w = welch(a, b)
    if w is None:
        return None
    if min(len(a), len(b)) < BOOTSTRAP_MIN_SEEDS:
        return welch_interval(w, level), WELCH_T
    ci = bootstrap_diff(a, b, level)
    assert ci is not None  # 2 or more a side, as welch checked
    return ci, BOOTSTRAP


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (family-wise error over all the tests given)."""
    idx = sorted((i for i, p in enumerate(pvalues) if p is not None), key=lambda i: pvalues[i])  # type: ignore[arg-type]
    m, out, running = len(idx), list(pvalues), 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))  # type: ignore[operator]
        out[i] = running
    return out
