"""Which price a report's cost uses (planner audit of 2026-12-07): a plain substring test took the first key in the
table that occurred anywhere in the device name, so the shipped table priced an L40S as an L4 ($0.80) and a GH200 as
an H200."""

from __future__ import annotations

import pytest

from stride.report.recommend import load_prices, price_for


@pytest.mark.parametrize("gpu", ["NVIDIA L40S", "NVIDIA L40", "NVIDIA GH200 480GB", "NVIDIA GB200"])
def test_a_key_inside_a_longer_model_number_does_not_price_the_part(gpu: str) -> None:
    assert price_for({"gpus": [gpu]}, load_prices()) == (None, "no price")


def test_the_most_specific_key_wins_and_count_multiplies() -> None:
    prices = {"A100": 1.8, "A100-SXM4-80GB": 2.2, "cpu": 0.1}
    assert price_for({"gpus": ["NVIDIA A100-SXM4-80GB"] * 2}, prices) == (4.4, "A100-SXM4-80GB")
    assert price_for({"gpus": ["NVIDIA A100-PCIE-40GB"]}, prices) == (1.8, "A100")


def test_the_shipped_table_still_prices_the_parts_it_names() -> None:
    prices = load_prices()
    assert price_for({"gpus": ["NVIDIA H100 80GB HBM3"]}, prices) == (prices["H100"], "H100")
    assert price_for({"gpus": ["NVIDIA L4"]}, prices) == (prices["L4"], "L4")
    assert price_for({"gpus": []}, prices) == (prices["cpu"], "cpu")
