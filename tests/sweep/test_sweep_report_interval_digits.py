"""summary.md and report.html show a pair's 95 % interval to 3 significant digits an end (first contact: 17, e.g.
`[-0.0722972678512862, 0.0658270570010474]`, for two seeds a side); results.json keeps the full figures."""

from __future__ import annotations

import json
import re
from pathlib import Path

from stride.sweep.report_files import write_report


def _r(lr: float, seed: int, val: float) -> dict:
    return {"id": f"{lr}-{seed}", "label": f"optim.lr={lr} train.seed={seed}",
            "values": {"optim.lr": lr, "train.seed": seed}, "mode": "packed", "pack": {"index": 0, "size": 6},
            "summary": {"final_val_loss": val, "status": "done", "steps": 30}, "one_by_one_s": None}


def test_the_interval_is_shown_to_three_significant_digits(tmp_path: Path) -> None:
    res = [_r(0.001, 0, 1.3647), _r(0.001, 1, 1.3871), _r(0.003, 0, 1.3907), _r(0.003, 1, 1.3677)]
    plan = {"grid": ["optim.lr=1e-3,3e-3", "train.seed=0,1"], "points": [{"id": r["id"]} for r in res],
            "axes": [{"key": "optim.lr", "values": [0.001, 0.003]}, {"key": "train.seed", "values": [0, 1]}]}
    write_report(tmp_path, plan, res, [])
    lo, hi = json.loads((tmp_path / "results.json").read_text())["sweep"]["pairs"][0]["ci95"]
    assert len(repr(lo)) > 12  # full precision kept for machines
    shown = f"[{lo:.3g}, {hi:.3g}]"
    md = (tmp_path / "summary.md").read_text()
    cell = shown.replace("[", "\\[").replace("]", "\\]")  # md_cell escapes the brackets
    assert f"| {cell} | welch_t |" in md, md
    assert not re.search(r"\d{5,}", md.split("## Pairs of configurations")[1])  # no long runs of digits
    assert f"<td>{shown}</td>" in (tmp_path / "report.html").read_text()
