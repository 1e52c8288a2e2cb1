"""Alpha-beta collective costs against their closed forms, and link-level selection."""

from __future__ import annotations

import math

import pytest

from stride.perfmodel import collectives as c
from stride.perfmodel.hardware import load_catalog

LINK = c.Link("scale-out", bw=25e9, alpha_s=8e-6)


@pytest.mark.parametrize("n", [2, 3, 8, 64])
def test_ring_all_reduce_closed_form(n: int) -> None:
    nbytes = 3.4e9
    expected = 2 * (n - 1) / n * nbytes / 25e9 + 2 * (n - 1) * 8e-6
    assert c.all_reduce_time(nbytes, n, LINK, "ring") == pytest.approx(expected, rel=1e-12)


def test_hand_computed_ring_all_reduce() -> None:
    # 1 GB over 4 ranks at 100 GB/s, 10 us: 2*3/4*0.01 s + 6*10 us = 0.01506 s
    assert c.all_reduce_time(1e9, 4, c.Link("x", 100e9, 10e-6)) == pytest.approx(0.01506, rel=1e-12)


def test_tree_all_reduce_closed_form_and_crossover() -> None:
    n = 1024
    assert c.all_reduce_time(1e6, n, LINK, "tree") == pytest.approx(2 * 10 * 8e-6 + 2 * 1e6 / 25e9)
    # many ranks, small message: tree's log latency wins; few ranks, large message: ring's
    # (n-1)/n bandwidth term wins (at n=1024 it saves only 1/1024 of the bandwidth time)
    assert c.best_all_reduce_time(1e3, n, LINK)[1] == "tree"
    assert c.best_all_reduce_time(1e9, 4, LINK)[1] == "ring"


def test_reduce_scatter_plus_all_gather_equals_all_reduce() -> None:
    for n in (2, 5, 16):
        rs, ag = c.reduce_scatter_time(7e8, n, LINK), c.all_gather_time(7e8, n, LINK)
        assert rs + ag == pytest.approx(c.all_reduce_time(7e8, n, LINK, "ring"), rel=1e-12)
        assert rs == pytest.approx((n - 1) / n * 7e8 / 25e9 + (n - 1) * 8e-6, rel=1e-12)


def test_single_rank_and_p2p() -> None:
    assert c.all_reduce_time(1e9, 1, LINK) == 0.0
    assert c.p2p_time(5e6, LINK) == pytest.approx(8e-6 + 5e6 / 25e9)
    with pytest.raises(ValueError):
        c.all_reduce_time(1.0, 4, LINK, "butterfly")


def test_group_link_levels_on_a100_nodes() -> None:
    # 8 per NVLink domain, 300 GB/s/dir NVLink at the 78% nccl-tests reach, 25 GB/s/GPU IB at 94%
    hw = load_catalog().get("a100-80gb")
    up, out = 0.78, 0.94
    assert (hw.scaleup_busbw_fraction, hw.scaleout_busbw_fraction) == (up, out)
    assert c.group_link(hw, 8, 1).name == "scale-up"
    assert c.group_link(hw, 8, 1).bw == pytest.approx(300e9 * up)
    one_per_node = c.group_link(hw, 32, 8)  # the DP group of tp=8: one rank per node, one NIC each
    assert (one_per_node.name, one_per_node.bw) == ("scale-out", pytest.approx(25e9 * out))
    full_nodes = c.group_link(hw, 32, 1)  # 8 ranks per node drive 8 NICs: 188 GB/s, under NVLink's 234
    assert full_nodes.bw == pytest.approx(8 * 25e9 * out)
    assert c.group_link(hw, 1, 1).bw == math.inf
    assert c.group_link(hw, 16, 2, net_efficiency=0.5).bw == pytest.approx(0.5 * 4 * 25e9 * out)
