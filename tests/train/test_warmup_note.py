"""A run of no more steps than metrics.skip_steps times its warm-up steps (something rather than nothing):
summary.json and the console say so, naming both settings (only timed_steps showed it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))

from fault_helpers import REPO, stride_main  # noqa: E402

from stride.config import load_config  # noqa: E402
from stride.train.summary import warmup_note  # noqa: E402
from stride.train.trainer import Trainer  # noqa: E402

BASE = ["data.n_assets=4", "data.n_steps=512", "data.seq_len=8", "data.horizons=[1]", "train.batch_size=16",
        "train.val_every=0", "metrics.progress=false", "metrics.flops=false", "model.name=mlp", "model.size=tiny"]


@pytest.mark.parametrize(("steps", "skip", "noted"), [(2, 3, True), (3, 3, True), (4, 3, False), (1, 0, False)])
def test_summary_notes_a_run_of_warm_up_steps_only(steps: int, skip: int, noted: bool) -> None:
    cfg = load_config(overrides=[*BASE, f"train.steps={steps}", f"metrics.skip_steps={skip}"])
    s = Trainer(config=cfg, write_run_dir=False).fit().summary
    assert s["timed_steps"] == (steps if steps <= skip else steps - skip)
    if noted:
        assert f"train.steps = {steps}" in s["timing_note"] and f"metrics.skip_steps = {skip}" in s["timing_note"]
        assert "warm-up" in s["timing_note"]
    else:
        assert s["timing_note"] is None


def test_a_resumed_segment_is_judged_by_the_steps_it_ran() -> None:
    assert warmup_note(10, 8, 3) is not None and "steps 9..10" in warmup_note(10, 8, 3)
    assert warmup_note(10, 6, 3) is None


def test_stride_train_warns_on_the_console(tmp_path: Path) -> None:
    res = stride_main("train", str(REPO / "configs" / "quickstart.toml"), "--out", str(tmp_path / "run"),
                      "--no-progress", *[a for o in [*BASE, "train.steps=2"] for a in ("--set", o)])
    assert res.code == 0, res.err
    text = " ".join(res.out.split())  # rich wraps the line
    assert "warning: train.steps = 2 is not above metrics.skip_steps = 3" in text
