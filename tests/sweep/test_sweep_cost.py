"""The sweep's cost line compares like with like, and a sweep that packs nothing shows no packing speed-up.

Before: a lone point's "one by one" time was its wall time (validation and warm-up in) and the sweep's its
training steps' time, so `stride sweep configs/quickstart.toml ... ` whose four points all trained alone
reported "1.17x on training steps" (AMD EPYC, 2 cores). Then it showed a tautological "1.00x", and on a contended
host "1.00x ..., UNRELIABLE: ..." (review); now "not packed: every point trained alone".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_fixtures import mlp_toml

from stride.cli.main import main
from stride.sweep.report_files import cost, unreliable_text


def test_a_sweep_of_lone_points_is_no_faster_than_one_by_one(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A sweep that packed nothing has no packing speed-up to show: not a tautological 1.00x, and no UNRELIABLE
    note on it (review: a lone run that waited for cores put "1.00x on training steps, UNRELIABLE: the packs'
    timings were of a contended host" in summary.md)."""
    cfg = tmp_path / "sweep.toml"
    cfg.write_text(mlp_toml(12, 4, "skip_steps = 2"))  # validation every 4 steps: wall time well above the steps'
    out = tmp_path / "s"
    argv = ["sweep", str(cfg), "--grid", "train.seed=0..1", "--pack", "1", "--out", str(out)]
    assert main(argv) == 0
    packs = [json.loads(line) for line in (out / "packs.jsonl").read_text().splitlines()]
    assert packs and all(p["solo"] for p in packs)
    c = json.loads((out / "results.json").read_text())["sweep"]["cost"]
    assert c["one_by_one_s"] == pytest.approx(c["sweep_train_s"], rel=1e-9)  # like for like
    assert c["train_speedup"] is None and c["speedup"] is None and c["packed_packs"] == 0
    # a contended host: each lone run's threads waited for cores; the report is written again on the same command
    (out / "packs.jsonl").write_text("".join(json.dumps({**p, "waiting_threads": 0.9}) + "\n" for p in packs))
    capsys.readouterr()
    assert main(argv) == 0
    summary = (out / "summary.md").read_text()
    assert "of training steps (not packed: every point trained alone)" in summary
    assert "x on training steps" not in summary and "UNRELIABLE" not in summary
    c = json.loads((out / "results.json").read_text())["sweep"]["cost"]
    assert c["packs_unreliable"] is None and c["train_speedup"] is None
    err = capsys.readouterr().err
    assert "every point trained alone (pack size 1)" in err and "UNRELIABLE" not in err


def _packs(results: list[dict], *packs: dict) -> dict:
    return cost(results, list(packs), None)


def test_only_packs_of_models_together_carry_the_speedup_and_its_notes() -> None:
    results = [{"id": i, "one_by_one_s": 0.35, "summary": {"steps": 60}} for i in "abcd"]
    bad_rate = {"method": "3 windows", "unreliable": "cut at the 5 s cap"}
    solo = {"ids": ["a"], "size": 1, "solo": True, "wall_s": 0.5, "time": 1.0, "train_s": 0.35,
            "waiting_threads": 0.9}
    of_one = {"ids": ["b"], "size": 1, "solo": False, "wall_s": 0.5, "time": 2.0, "train_s": 0.35,
              "one_by_one_rate": bad_rate}
    c = _packs(results[:2], solo, of_one)
    assert (c["train_speedup"], c["speedup"], c["packed_packs"], c["packs"]) == (None, None, 0, 2)
    assert c["speedup_unreliable"] is None and c["packs_unreliable"] is None and unreliable_text(c) is None
    assert c["one_by_one_methods"] == []
    # beside a real pack (steady, a sound lone rate) the lone runs' contention says nothing of its speed-up
    pack = {"ids": ["c", "d"], "size": 2, "solo": False, "wall_s": 0.5, "time": 3.0, "train_s": 0.4,
            "one_by_one_rate": {"method": "3 windows", "unreliable": None}, "waiting_threads": 0.0}
    c = _packs(results, solo, of_one, pack)
    assert c["packed_packs"] == 1 and c["train_speedup"] == pytest.approx(1.4 / 1.1)
    assert unreliable_text(c) is None and c["one_by_one_methods"] == ["3 windows"]
    c = _packs(results, solo, of_one, {**pack, "waiting_threads": 0.5})
    assert unreliable_text(c) == ("the packs' timings were of a contended host (1 pack(s) with up to 0.50 threads "
                                  "waiting for cores other processes held)")
