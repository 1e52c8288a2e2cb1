"""`stride plan` where no layout fits: it lists the layouts that miss by the least memory (the fastest ones that do
not fit are the largest micro-batches, the furthest from fitting: first-contact audit of 2026-12-06) and the fewest
devices on which something fits, found by planning there."""

from __future__ import annotations

import json

import pytest

from stride.cli.main import main
from stride.perfmodel.efficiency import shipped_efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.model_spec import PRESETS
from stride.perfmodel.planner import default_global_batch, fits_from, search


def test_json_gives_the_closest_layouts_and_the_device_count_that_fits(capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", "--model", "llama3-70b", "--devices", "1", "--hardware", "h100-sxm", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    closest = [p["peak_mem_gib"] for p in out["closest_not_fitting"]]
    assert closest == sorted(closest) and closest[0] <= min(p["peak_mem_gib"] for p in out["fastest_not_fitting"])
    n = out["fits_from_devices"]
    assert isinstance(n, int) and n > 1
    # by hand: planning at that count fits, at half of it nothing does
    spec, hw, eff = PRESETS["llama3-70b"], load_catalog().get("h100-sxm"), shipped_efficiency()
    assert search(spec, hw, n, default_global_batch(spec, n), eff).best is not None
    assert search(spec, hw, n // 2, default_global_batch(spec, n // 2), eff).best is None


def test_the_table_says_where_it_fits(capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", "--model", "llama3-70b", "--devices", "1", "--hardware", "h100-sxm"]) == 1
    text = capsys.readouterr().out
    assert "the closest need" in text and "fits from " in text and "--devices" in text


def test_fits_from_is_none_where_no_count_fits() -> None:
    hw = load_catalog().get("h100-sxm")
    huge = PRESETS["llama3-8b"].with_seq(4_000_000)  # one sequence's activations outgrow any split of the model
    assert fits_from(huge, hw, 1, 1, shipped_efficiency(), most=64) is None
