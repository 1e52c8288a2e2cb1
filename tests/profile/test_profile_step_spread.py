"""`stride profile` warns where the traced steps disagree or are too few to judge by.

Before (outside audit): `stride profile configs/quickstart.toml --set model.name=mlp --steps 2 --wait 2` traced steps
of 4.7 and 241 ms and reported "memory-bound" from their 122.85 ms mean without a word about the 50x spread.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stride.cli.profile import SPREAD_MAX_OVER_MIN, step_spread


def _report(*ranks: list[float]) -> dict:
    return {"ranks": {str(i): {"per_step": [{"step": k, "span_us": ms * 1e3} for k, ms in enumerate(spans)],
                               "verdict": {"bound": "memory-bound"}}
                      for i, spans in enumerate(ranks)}}


def test_a_50x_spread_between_two_steps_is_warned_and_the_verdict_carries_it() -> None:
    rep = _report([4.7, 241.0])
    got = step_spread(rep)
    assert got["ranks"]["0"]["max_over_min"] == pytest.approx(241.0 / 4.7)
    assert len(got["warnings"]) == 2
    spread, few = got["warnings"]
    assert spread.startswith("the 2 traced steps took 4.7 to 241.0 ms (51x apart, more than 3x)")
    assert "--steps 10 --wait 10" in spread
    assert few.startswith("the verdict rests on 2 traced steps, too few") and "--steps 5 or more" in few
    assert rep["ranks"]["0"]["verdict"]["caveat"] == f"{spread}; {few}"


def test_steady_steps_get_no_warning() -> None:
    # the quick-start MLP after --wait 4: 3.0-3.8 ms over 10 steps (1.3x)
    rep = _report([3.8, 3.5, 3.0, 3.2, 3.6, 3.6, 3.2, 3.4, 3.5, 3.4])
    got = step_spread(rep)
    assert got["warnings"] == [] and "caveat" not in rep["ranks"]["0"]["verdict"]
    assert got["ranks"]["0"]["steps"] == 10 and got["ranks"]["0"]["cv"] < 0.1


def test_the_threshold_and_the_rank_named_where_several() -> None:
    spans = [10.0, 10.0, 10.0 * SPREAD_MAX_OVER_MIN]  # exactly 3x: not above it
    assert step_spread(_report(spans))["warnings"] == []
    got = step_spread(_report([5.0, 5.0, 5.0], [5.0, 5.0, 16.0]))
    assert len(got["warnings"]) == 1 and got["warnings"][0].startswith("rank 1: the 3 traced steps took 5.0 to 16.0")
    one = step_spread(_report([5.0]))["warnings"]
    assert one == ["the verdict rests on 1 traced step, too few to tell a typical step from an outlier; use --steps 5 "
                   "or more"]


@pytest.mark.slow
def test_profile_with_two_steps_says_so_in_its_output_and_json(tmp_path: Path) -> None:
    out = tmp_path / "prof"
    cmd = [sys.executable, "-m", "stride", "profile", "configs/quickstart.toml", "--set", "model.name=mlp",
           "--steps", "2", "--wait", "1", "--out", str(out), "--set", "train.threads=1"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 0, p.stderr[-2000:]
    assert "stride profile: warning: the verdict rests on 2 traced steps" in p.stdout
    rep = json.loads((out / "analysis.json").read_text())
    assert rep["step_spread"]["ranks"]["0"]["steps"] == 2
    assert any("rests on 2 traced steps" in w for w in rep["step_spread"]["warnings"])
    assert "rests on 2 traced steps" in rep["ranks"]["0"]["verdict"]["caveat"]
