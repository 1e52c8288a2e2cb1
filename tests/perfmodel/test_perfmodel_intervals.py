"""Interval arithmetic: quantiles of held-out residuals per kind, the fallback to coarser kinds
and to leave-one-hardware-out residuals for unseen generations, and the bounds they give."""

from __future__ import annotations

import math

import pytest

from stride.perfmodel.intervals import IntervalTable, apply, load_intervals, quantile


def test_quantile_interpolates_linearly() -> None:
    xs = [float(i) for i in range(11)]  # 0..10
    assert quantile(xs, 0.1) == pytest.approx(1.0) and quantile(xs, 0.9) == pytest.approx(9.0)
    assert quantile([3.0, 1.0], 0.5) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_bounds_turn_residuals_into_an_interval_on_the_truth() -> None:
    """r = ln(pred/meas), so truth = pred e^-r: the 10th/90th percentiles of r bound the truth."""
    q10, q90 = math.log(0.9), math.log(1.2)
    iv = apply(1000.0, 2.0, q10, q90)
    assert iv["tokens_per_s_per_gpu_lo"] == pytest.approx(1000 / 1.2)
    assert iv["tokens_per_s_per_gpu_hi"] == pytest.approx(1000 / 0.9)
    assert iv["iter_time_s_lo"] == pytest.approx(2.0 * 0.9) and iv["iter_time_s_hi"] == pytest.approx(2.0 * 1.2)


def test_an_interval_always_contains_its_prediction() -> None:
    iv = apply(1000.0, 2.0, math.log(1.1), math.log(1.3))  # the model over-predicts every residual
    assert iv["tokens_per_s_per_gpu_lo"] == pytest.approx(1000 / 1.3) and iv["tokens_per_s_per_gpu_hi"] == 1000.0
    assert iv["iter_time_s_lo"] == 2.0


def _rows(kind: tuple[str, str, str], values: list[float]) -> list[tuple[tuple[str, str, str], float]]:
    return [(kind, v) for v in values]


def test_kind_falls_back_to_coarser_kinds_with_enough_rows() -> None:
    tight = [0.01 * (i - 10) for i in range(21)]  # -0.1 .. 0.1
    wide = [0.05 * (i - 10) for i in range(21)]  # -0.5 .. 0.5
    table = IntervalTable.from_residuals(_rows(("hopper", "16-bit", "megatron"), tight)
                                         + _rows(("ampere", "16-bit", "fsdp1"), wide)
                                         + _rows(("hopper", "fp8", "fsdp1"), [0.2] * 3),
                                         unseen=[0.3 * (i - 10) for i in range(21)])
    q10, q90, basis = table.bounds(("hopper", "16-bit", "megatron"))
    assert (q10, q90) == (pytest.approx(-0.08), pytest.approx(0.08)) and "hopper|16-bit|megatron" in basis
    _, _, basis = table.bounds(("hopper", "fp8", "fsdp1"))  # 3 rows of its own: too few, coarser kind
    assert "hopper|*|*" in basis or "*|fp8" in basis
    q10, q90, basis = table.bounds(("blackwell", "16-bit", "megatron"))  # a generation no row ran on
    assert "unseen" in basis and q90 == pytest.approx(0.3 * 8)


def test_shipped_table_loads_and_a_missing_file_gives_the_wide_default(tmp_path) -> None:
    table = load_intervals()
    assert table.groups, "data/perfmodel/intervals.json should ship (benchmarks/perfmodel_error.py --write)"
    empty = load_intervals(tmp_path / "none.json")
    q10, q90, basis = empty.bounds(("hopper", "16-bit", "megatron"))
    assert q10 < 0 < q90 and "unseen" in basis or "default" in basis


def test_round_trip_through_json() -> None:
    t = IntervalTable.from_residuals(_rows(("ampere", "16-bit", "fsdp1"), [0.01 * i for i in range(12)]))
    back = IntervalTable.from_json(t.to_json())
    assert back.groups == t.groups and back.generations == t.generations


def test_a_kind_backed_by_few_sources_takes_the_coarser_kinds_interval() -> None:
    """Twenty rows of one kind from two sources say little about the next source's error: their kind's own
    quantiles are not used (the coarser kind's are); from four sources they are."""
    hopper = [(("hopper", "16-bit", "fsdp2"), 0.30 + 0.001 * i) for i in range(20)]
    others = [(("hopper", "16-bit", "megatron"), -0.05 + 0.01 * (i % 10)) for i in range(40)]
    rows = hopper + others
    two = [f"a{i % 2}" for i in range(20)] + [f"m{i % 8}" for i in range(40)]
    four = [f"a{i % 4}" for i in range(20)] + [f"m{i % 8}" for i in range(40)]
    q10, _, basis = IntervalTable.from_residuals(rows, sources=two).bounds(("hopper", "16-bit", "fsdp2"))
    assert "fsdp2" not in basis and q10 < 0.2
    q10, _, basis = IntervalTable.from_residuals(rows, sources=four).bounds(("hopper", "16-bit", "fsdp2"))
    assert basis.startswith("hopper|16-bit|fsdp2") and q10 > 0.25


def test_a_moe_run_takes_the_moe_residuals_where_enough_sources_back_them() -> None:
    """MoE rows far off (as the model's MoE error is) give MoE runs their own wide interval; a dense run keeps the
    interval it had before MoE runs were told apart; with MoE rows from too few sources a MoE run falls back to the
    dense chain."""
    dense = [(("hopper", "16-bit", "megatron"), -0.05 + 0.01 * (i % 10)) for i in range(40)]
    moe = [(("hopper", "16-bit", "megatron", "moe"), (-0.4 if i % 2 else 0.5) + 0.001 * i) for i in range(16)]
    dense_src = [f"d{i % 8}" for i in range(40)]
    t = IntervalTable.from_residuals(dense + moe, sources=dense_src + [f"m{i % 4}" for i in range(16)])
    q10, q90, basis = t.bounds(("hopper", "16-bit", "megatron", "moe"))
    assert basis.startswith("moe:") and q10 < -0.3 and q90 > 0.4
    untagged = IntervalTable.from_residuals(dense + [(k[:3], r) for k, r in moe],
                                            sources=dense_src + [f"m{i % 4}" for i in range(16)])
    assert t.bounds(("hopper", "16-bit", "megatron")) == untagged.bounds(("hopper", "16-bit", "megatron"))
    few = IntervalTable.from_residuals(dense + moe, sources=dense_src + [f"m{i % 2}" for i in range(16)])
    assert not few.bounds(("hopper", "16-bit", "megatron", "moe"))[2].startswith("moe:")
    back = IntervalTable.from_json(t.to_json())
    assert back.bounds(("hopper", "16-bit", "megatron", "moe")) == (q10, q90, t.bounds(("hopper", "16-bit", "megatron",
                                                                                         "moe"))[2])


def test_an_unseen_part_is_never_given_a_narrower_interval_than_a_seen_one() -> None:
    """Outside audit 4: Gaudi 3 (no development rows) got 0.84-1.24x the hours from the pooled LOHO residuals,
    H100 (its own residuals, widened for few sources) 0.75-1.60x: the part never measured read as the safer bet."""
    table = IntervalTable(groups={"hopper|16-bit|megatron": (-0.47, 0.29, 41), "*|16-bit|megatron": (-0.2, 0.2, 64),
                                  "ampere|16-bit|*": (-0.1, 0.1, 200)},
                          unseen=(-0.17, 0.21, 547), generations=frozenset({"hopper", "ampere"}))
    q10, q90, basis = table.bounds(("gaudi3", "16-bit", "megatron"))
    assert (q10, q90) == (-0.47, 0.29) and "unseen hardware" in basis  # the widest seen part's spread
    assert table.bounds(("hopper", "16-bit", "megatron"))[:2] == (-0.47, 0.29)
    wide_loho = IntervalTable(groups=table.groups, unseen=(-0.9, 0.9, 547), generations=table.generations)
    assert wide_loho.bounds(("gaudi3", "16-bit", "megatron"))[:2] == (-0.9, 0.9)  # LOHO wider: kept
