"""A resumed sweep's speed-up counts the same points on both sides (outside audit of `stride sweep`, D1).

A pack stopped by SIGTERM, Ctrl-C or a kill writes no packs.jsonl record, but the members it had finished are kept
as points. Before, their one-by-one time was counted and their pack's time was not, while the rerun's pack held only
the other members: the resumed sweep's speed-up was several times the same sweep's uninterrupted one. Now a point
counts on both sides only where its pack finished, and the report says how many are left out.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from sweep_fixtures import mlp_toml

import stride.sweep.runner
from stride.cli.main import main
from stride.sweep.report_files import cost


def _points(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (out / "points").glob("*.json")}


def test_points_of_a_stopped_pack_are_on_neither_side_of_the_speedup(tmp_path: Path, monkeypatch,
                                                                      capfd) -> None:
    """Four points in one pack of 4; the two 2-step members finish, then SIGTERM stops the pack before the 8-step
    ones do. The rerun trains those two in a pack of 2: the cost compares that pack with those two points."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(mlp_toml(8, 4))
    out = tmp_path / "s"
    argv = ["sweep", str(cfg), "--grid", "train.steps=2,8", "--grid", "train.seed=0,1", "--pack", "4",
            "--out", str(out)]
    real_point = stride.sweep.runner.Recorder.point
    sent: list[bool] = []

    def point_then_term(self, item):  # the first member written: a SIGTERM, acted on after this step
        real_point(self, item)
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(stride.sweep.runner.Recorder, "point", point_then_term)
    assert main(argv) == 130
    first = _points(out)
    assert len(first) == 2 and all(p["summary"]["steps"] == 2 for p in first.values())
    assert not (out / "packs.jsonl").exists() or not (out / "packs.jsonl").read_text().strip()  # no record
    monkeypatch.setattr(stride.sweep.runner.Recorder, "point", real_point)
    capfd.readouterr()
    assert main(argv) == 0
    packs = [json.loads(line) for line in (out / "packs.jsonl").read_text().splitlines()]
    assert len(packs) == 1 and packs[0]["size"] == 2 and not packs[0]["solo"]
    points = _points(out)
    resumed = [points[i] for i in packs[0]["ids"]]
    assert all(p["summary"]["steps"] == 8 for p in resumed) and not set(packs[0]["ids"]) & set(first)
    c = json.loads((out / "results.json").read_text())["sweep"]["cost"]
    # was the four points' estimates (the two 2-step ones of the stopped pack in) against the pack of 2's time
    assert c["one_by_one_s"] == pytest.approx(sum(p["one_by_one_s"] for p in resumed), rel=1e-12)
    assert c["sweep_train_s"] == pytest.approx(packs[0]["train_s"], rel=1e-12)
    assert c["points_outside_packs"] == 2
    assert c["train_speedup"] == pytest.approx(c["one_by_one_s"] / c["sweep_train_s"], rel=1e-12)
    assert "2 finished point(s) of no finished pack (one a stop cut short) are on neither side" in \
        (out / "summary.md").read_text()


def test_cost_counts_each_point_of_the_finished_packs_once() -> None:
    results = [{"id": i, "one_by_one_s": 1.0, "summary": {"steps": 10}} for i in "abcde"]
    packs = [{"ids": ["a", "b"], "size": 2, "solo": False, "wall_s": 1.0, "time": 1.0, "train_s": 0.5},
             {"ids": ["c", "d"], "size": 2, "solo": False, "wall_s": 1.0, "time": 2.0, "train_s": 0.5,
              "error": "the task failed"}]
    c = cost(results, packs, None)
    # c, d: their pack failed (no time counted); e: its pack was stopped (no record)
    assert (c["one_by_one_s"], c["sweep_train_s"], c["points_outside_packs"]) == (2.0, 0.5, 3)
    assert c["train_speedup"] == pytest.approx(4.0)
    assert cost(results[:2], packs[:1], None)["points_outside_packs"] == 0
