"""benchmarks/perfmodel_choices.py: the choice-set scorer's arithmetic (top-1, regret, pairwise order, ratio
error, the rule of thumb) on hand-made options, its grouping of rows into sets, and one run on a repository CSV,
so the figures in docs/perfmodel.md "Would it have chosen right?" mean what they say."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOOM = ROOT / "data" / "perfmodel" / "round24_reports.csv"


def _choices():
    spec = importlib.util.spec_from_file_location("perfmodel_choices", ROOT / "benchmarks" / "perfmodel_choices.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["perfmodel_choices"] = mod  # its dataclass looks its module up there
    spec.loader.exec_module(mod)
    return mod


def test_score_sets_arithmetic():
    m = _choices()
    opt = m.Option
    # the model picks b (predicted 95), measured 90 against a's 100: 10 % regret, top-1 missed
    wrong = [opt("a", 100, 80, ["a"], (2, -1, False)), opt("b", 90, 95, ["b"], (1, -1, False)),
             opt("c", 50, 40, ["c"], (4, -1, False))]
    # the model picks the best (regret 0)
    right = [opt("x", 200, 190, ["x"], (1, -1, False)), opt("y", 198, 150, ["y"], (2, -1, False))]
    s = m.score_sets([wrong, right])
    assert s["sets"] == 2 and s["options"] == 5
    assert s["top1"] == pytest.approx(0.5) and s["top1_within_3pct"] == pytest.approx(0.5)
    assert s["regret_mean_pct"] == pytest.approx(5.0) and s["regret_median_pct"] == pytest.approx(5.0)
    # pairs measured > 5 % apart: (a,b) disagree, (a,c) agree, (b,c) agree; (x,y) 1 % apart is not scored
    assert s["pairs_scored"] == 3 and s["pairwise_order"] == pytest.approx(2 / 3)
    def sym(p: float, m: float) -> float:  # the same for a/b and b/a
        return max(p / m, m / p) - 1

    ratio_ab = sym(80 / 95, 100 / 90)
    ratio_ac = sym(80 / 40, 100 / 50)
    ratio_bc = sym(95 / 40, 90 / 50)
    ratio_xy = sym(190 / 150, 200 / 198)
    expect = sorted([ratio_ab, ratio_ac, ratio_bc, ratio_xy])
    assert s["ratio_err_median_pct"] == pytest.approx(100 * (expect[1] + expect[2]) / 2)
    assert s["worst"] == [{"regret_pct": 10.0, "picked": "b", "best": "a", "row": "b"}]
    # the rule of thumb picks the least model parallelism: b in the first set (10 % lost), x in the second
    r = m.score_sets([wrong, right], rule=True)
    assert r["top1"] == pytest.approx(0.5) and r["regret_mean_pct"] == pytest.approx(5.0)
    assert r["random_top1"] == pytest.approx((1 / 3 + 1 / 2) / 2) and r["rule_ties"] == 0
    # options the rule cannot tell apart count at their mean (the first in the file decided before)
    tied = [opt("p", 100, 1, ["p"], (1, -1, False)), opt("q", 80, 1, ["q"], (1, -1, False))]
    t = m.score_sets([tied], rule=True)
    assert t["top1"] == pytest.approx(0.5) and t["regret_mean_pct"] == pytest.approx(10.0) and t["rule_ties"] == 1
    assert s["misses"] == 1 and s["miss_regret_mean_pct"] == pytest.approx(10.0)


def _row(rid, lay, devices=8, hardware="h100", measured=100.0, predicted=100.0, mp=1, mb=1):
    return {"row_id": rid, "file": "f", "table": "t", "source": "s", "model": "m", "global_batch": 64,
            "precision": "bf16", "framework": "megatron", "software": "Megatron-LM", "trained": (False, 0),
            "hardware": hardware, "devices": devices,
            "layout": (("dp", str(devices // mp)), ("tp", str(mp))), "model_parallel": mp, "micro_batch": mb,
            "recompute": "none", "measured": measured, "predicted": predicted}


def test_choice_sets_group_and_merge_repeats():
    m = _choices()
    rows = [_row("tp1-a", 1, measured=100, predicted=110), _row("tp1-b", 1, measured=120, predicted=110),
            _row("tp2", 2, mp=2, measured=90, predicted=80),
            _row("other-part", 1, hardware="a100", measured=40, predicted=45),
            _row("more-devices", 1, devices=16, measured=95, predicted=100)]
    sets = m.choice_sets(rows)
    (layout,) = sets["layout"]  # h100 at 8 devices: tp1 (two measurements: one option at their median) and tp2
    by = {o.name: o for o in layout}
    assert set(by) == {"dp=8 tp=1", "dp=4 tp=2"}
    assert by["dp=8 tp=1"].measured == pytest.approx(110) and by["dp=8 tp=1"].rows == ["tp1-a", "tp1-b"]
    (hw,) = sets["hardware"]  # 8 devices: h100 at its best (110 measured, 110 predicted) against a100
    assert {o.name: (o.measured, o.predicted) for o in hw} == {"h100": (110, 110), "a100": (40, 45)}
    (scale,) = sets["scale"]  # h100 at 8 and 16 devices
    assert {o.name for o in scale} == {"8", "16"}
    # the model reads two runs alike whose software differs (a kernel library on and off): not a repeat, left out;
    # LoRA against full training is not a layout choice: another set
    other = {**_row("tp1-c", 1, measured=200, predicted=110), "software": "Megatron-LM + Thunder"}
    lora = {**_row("lora", 2, mp=2, measured=300, predicted=300), "trained": (True, 16)}
    # tp1's runs now differ in software: dropped; tp2 alone is no choice, nor is the LoRA run in a set of its own
    assert m.choice_sets([*rows, other, lora])["layout"] == []
    assert len(m.choice_sets([*rows, lora])["layout"]) == 1  # tp1 and tp2 of full training, as above


def test_runs_on_a_repository_csv(capsys):
    if not BLOOM.exists():
        pytest.skip("data/perfmodel/round24_reports.csv is missing")
    m = _choices()
    assert m.main([str(BLOOM), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    # BLOOM's reshaping log ran six TP/PP layouts on 24 and 36 nodes; the 1.3B GPT ten layouts on 8 V100
    assert res["layout"]["sets"] >= 2 and res["layout"]["options"] >= 8
    assert 0 <= res["layout"]["top1"] <= 1 and res["layout"]["regret_mean_pct"] >= 0
    assert set(res) >= {"layout", "hardware", "scale", "layout_rule_of_thumb", "rows"}
