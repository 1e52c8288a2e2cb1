"""Diverged seeds are part of a configuration's result (audit 10, F2 and F6).

Before: a configuration where 4 of 6 seeds diverged was ranked first on its 2 survivors ("1.0050 +- 0.0071 (sd
over 2 seeds)") and tested "significantly better" (Holm p 0.0016) than one that never diverged, with no word of
the divergence; a sweep whose configurations lost every seed to divergence said "fewer than 2 seeds per
configuration; add seeds", with 6 seeds each.
"""

from __future__ import annotations

import json
import re

import pytest

from stride.cli.main import main
from stride.cli.sweep import _log_best
from stride.sweep import report
from stride.sweep.report import pairwise, significance_line
from stride.sweep.report_files import write_report


def _r(lr: float, seed: int, val: float | None, status: str = "done") -> dict:
    return {"id": f"{lr}-{seed}", "label": f"optim.lr={lr} train.seed={seed}",
            "values": {"optim.lr": lr, "train.seed": seed}, "mode": "packed", "pack": {"index": 0, "size": 12},
            "summary": {"final_val_loss": val, "status": status, "steps": 20}, "one_by_one_s": None}


def _audit_results() -> list[dict]:
    """The audit's case: at lr 0.1 4 of 6 seeds diverged and the 2 survivors are the lowest losses of the sweep."""
    res = [_r(0.1, 0, 1.00), _r(0.1, 1, 1.01)] + [_r(0.1, s, None, "diverged") for s in range(2, 6)]
    return res + [_r(0.01, s, 1.10 + 0.005 * s) for s in range(6)]


def test_a_configuration_with_diverged_seeds_ranks_after_and_says_so(capsys) -> None:
    _log_best(_audit_results())
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["stride sweep:   1.1125 +- 0.0094 (sd over 6 seeds)  optim.lr=0.01",
                     "stride sweep:   1.0050 +- 0.0071 (sd over 2 of 6 seeds; 4 of 6 seeds diverged)  optim.lr=0.1"]


def test_a_pair_with_diverged_seeds_is_not_claimed_significant() -> None:
    (pair,) = pairwise(_audit_results())  # was: significant True, Holm p 0.0016, n 6 / 2
    assert pair["significant"] is None and pair["p"] is None and pair["p_holm"] is None and pair["ci95"] is None
    assert (pair["n_a"], pair["trained_a"], pair["diverged_a"]) == (6, 6, 0)  # a: lr 0.01 (sorted by name)
    assert (pair["n_b"], pair["trained_b"], pair["diverged_b"]) == (2, 6, 4)
    assert pair["mean_b"] == pytest.approx(1.005)
    assert significance_line([pair]) == ("no claim on which configurations differ: seeds diverged on a side (a mean "
                                         "over its survivors only)")


def test_configurations_without_divergence_are_still_tested_beside_one_with() -> None:
    res = _audit_results() + [_r(0.001, s, 1.30 + 0.005 * s) for s in range(6)]
    pairs = {(p["a"], p["b"]): p for p in pairwise(res)}
    tested = pairs[("optim.lr=0.001", "optim.lr=0.01")]
    assert tested["significant"] is True and tested["p_holm"] == tested["p"]  # Holm over the one tested pair
    assert significance_line(list(pairs.values())) == (
        "1 of 1 configuration pairs differ beyond seed noise; 2 pair(s) not tested: seeds diverged on a side (a "
        "mean over its survivors only)")
    ranked = [row["configuration"] for row in report.configuration_stats(res)]
    assert ranked == ["optim.lr=0.01", "optim.lr=0.001", "optim.lr=0.1"]


def test_the_report_files_say_how_many_seeds_diverged(tmp_path) -> None:
    res = _audit_results()
    plan = {"grid": ["optim.lr=0.1,0.01", "train.seed=0..5"], "points": [{"id": r["id"]} for r in res],
            "axes": [{"key": "optim.lr", "values": [0.1, 0.01]}, {"key": "train.seed", "values": list(range(6))}]}
    section = write_report(tmp_path, plan, res, [])
    assert [(c["configuration"], c["seeds"], c["trained"], c["diverged"]) for c in section["configurations"]] == [
        ("optim.lr=0.01", 6, 6, 0), ("optim.lr=0.1", 2, 6, 4)]
    md = (tmp_path / "summary.md").read_text()
    assert "| 2 | optim.lr=0.1 | 1.005 | 0.007071 | 2 | 6 | 4 | 2 of 6 seeds; 4 of 6 seeds diverged |" in md
    assert "| optim.lr=0.01 | optim.lr=0.1 | 6 | 2 | 0 | 4 | n/a |" in md
    html = (tmp_path / "report.html").read_text()
    assert "<h2>Configurations</h2>" in html and "2 of 6 seeds; 4 of 6 seeds diverged" in html
    saved = json.loads((tmp_path / "results.json").read_text())["sweep"]
    assert saved["pairs"][0]["not_tested"] == "seeds diverged on a side (a mean over its survivors only)"


def test_every_seed_diverged_says_so_and_does_not_ask_for_more_seeds(tmp_path, config, capsys) -> None:
    """SGD at lr 1e30 diverges on every seed at its first step; lr 1e-3 does not."""
    out = tmp_path / "s"
    assert main(["sweep", str(config), "--set", "optim.name=sgd", "--grid", "optim.lr=1e-3,1e30",
                 "--grid", "train.seed=0..2", "--pack", "6", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "stride sweep:   all 3 seeds diverged  optim.lr=1e+30" in err
    all_diverged = "every seed of a side diverged (no loss to compare)"
    assert f"no claim on which configurations differ: {all_diverged}" in err
    assert "add seeds" not in err and "fewer than 2 seeds" not in err  # 3 seeds each: more would not help
    statuses = {json.loads(p.read_text())["values"]["optim.lr"]: json.loads(p.read_text())["summary"]["status"]
                for p in (out / "points").glob("*.json")}
    assert statuses == {1e-3: "done", 1e30: "diverged"}
    assert f"no claim on which configurations differ: {all_diverged}" in (out / "summary.md").read_text()


def test_summary_md_keeps_its_columns_with_a_bar_or_a_tag_in_a_name(tmp_path) -> None:
    """Names are text in summary.md (audit 14): `|` split a row into more columns, `<b>` was raw HTML."""
    bad = "a|<b>x"
    res = [{**_r(0.1, s, 1.0 + 0.01 * s), "id": f"{bad}-{s}", "label": f"model.kind={bad} train.seed={s}",
            "values": {"model.kind": bad, "train.seed": s}} for s in range(2)]
    plan = {"grid": [f"model.kind={bad}", "train.seed=0..1"], "points": [{"id": r["id"]} for r in res],
            "axes": [{"key": "model.kind", "values": [bad]}, {"key": "train.seed", "values": [0, 1]}]}
    write_report(tmp_path, plan, res, [])
    md = (tmp_path / "summary.md").read_text()
    assert "<b>" not in md and "a\\|&lt;b&gt;x" in md
    for block in md.split("\n\n"):
        rows = [line for line in block.splitlines() if line.startswith("| ")]
        if rows:  # every row of a table has its header's number of cells (an escaped `\|` splits none)
            assert {len(re.split(r"(?<!\\)\|", row)) for row in rows} == {len(re.split(r"(?<!\\)\|", rows[0]))}
