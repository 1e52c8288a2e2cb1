"""A loss that goes NaN/inf: strict JSON in every file the run writes, and a run without checkpointing that
stops at once, marked diverged, with a one-line error and a nonzero exit (it finished with exit 0 and a bare
`NaN` in summary.json, which strict JSON parsers refuse)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checkpoint"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))

from ckpt_helpers import ckpt_config  # noqa: E402
from fault_helpers import REPO, one_line_error, stride_main  # noqa: E402

from stride.files import strict_json  # noqa: E402
from stride.train.divergence import TrainingDiverged  # noqa: E402
from stride.train.trainer import Trainer  # noqa: E402


def strict_load(text: str):
    """json.loads that refuses NaN/Infinity, as JSON.parse, Go or jq do."""
    def refuse(c: str):
        raise ValueError(f"not JSON: {c}")
    return json.loads(text, parse_constant=refuse)


def nan_from(step: int):
    """A loss function whose `step`-th call (the step's one forward: no accumulation) is NaN."""
    calls = {"n": 0}

    def loss_fn(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        loss = torch.nn.functional.mse_loss(pred, y)
        return loss * float("nan") if calls["n"] == step else loss

    return loss_fn


def test_strict_json_writes_null_and_names_the_fields() -> None:
    obj = {"a": float("nan"), "b": {"c": [1.0, float("inf"), torch.tensor(float("-inf"))]}, "d": 2.5, "e": True,
           "nonfinite_fields": ["a"]}
    text = strict_json.dumps(obj)
    back = strict_load(text)
    assert back["a"] is None and back["b"]["c"] == [1.0, None, None] and back["d"] == 2.5 and back["e"] is True
    assert back["nonfinite_fields"] == ["a", "b.c[1]", "b.c[2]"]  # merged with the one it had, no repeat
    assert strict_load(strict_json.dumps([float("nan"), 1])) == [None, 1]
    assert "nonfinite_fields" not in strict_load(strict_json.dumps({"x": 1.0}))
    # a finite record takes json's encoder alone: the same text as cleaning it first
    rec = {"step": 3, "loss": np.float32(1.25), "t": torch.tensor(2.0), "n": np.int64(7), "b": {"f": 0.5}, 4: (1, 2)}
    for indent in (None, 1):
        assert strict_json.dumps(rec, indent=indent) == json.dumps(strict_json.finite_json(rec)[0], indent=indent)


def test_a_run_without_checkpointing_stops_at_a_nan_loss(tmp_path: Path) -> None:
    cfg = ckpt_config("checkpoint.enabled=false", "metrics.log_every=4", "train.steps=24")
    run = tmp_path / "run"
    try:
        with pytest.raises(TrainingDiverged, match="not finite at step 5 .*logged step 8") as err:
            Trainer(config=cfg, out=run, loss_fn=nan_from(5)).fit()
    finally:
        torch.use_deterministic_algorithms(False)
    s = strict_load((run / "summary.json").read_text())
    assert s == err.value.summary | {"final_train_loss": None, "nonfinite_fields": ["final_train_loss"]}
    assert s["status"] == "diverged" and s["diverged_at_step"] == 5 and s["steps"] == 8
    assert s["final_train_loss"] is None and s["nonfinite_fields"] == ["final_train_loss"]
    recs = [strict_load(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == [4, 8]  # nothing trained after the step that found it
    assert recs[0]["loss"] > 0 and recs[1]["loss"] is None and recs[1]["nonfinite_fields"] == ["loss", "grad_norm"]


def test_a_finite_run_is_marked_finished(tmp_path: Path) -> None:
    cfg = ckpt_config("checkpoint.enabled=false", "train.steps=4")
    try:
        s = Trainer(config=cfg, out=tmp_path / "run").fit().summary
    finally:
        torch.use_deterministic_algorithms(False)
    assert s["status"] == "finished" and "diverged_at_step" not in s


def test_with_checkpointing_the_guard_keeps_the_run_going(tmp_path: Path) -> None:
    """The step guard skips the NaN step instead (nan_rollback_after = 0: no rollback); the run finishes."""
    cfg = ckpt_config("checkpoint.nan_rollback_after=0", "train.steps=6", "metrics.log_every=3")
    try:
        s = Trainer(config=cfg, out=tmp_path / "run", loss_fn=nan_from(6)).fit().summary
    finally:
        torch.use_deterministic_algorithms(False)
    assert s["status"] == "finished" and s["skipped_steps"] == 1
    written = strict_load((tmp_path / "run" / "summary.json").read_text())
    assert written["final_train_loss"] is None and written["nonfinite_fields"] == ["final_train_loss"]


def test_stride_train_exits_nonzero_and_readers_take_the_diverged_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    res = stride_main("train", str(REPO / "configs" / "quickstart.toml"), "--out", str(run), "--no-progress",
                      "--set", "optim.lr=1e6", "--set", "optim.warmup_steps=0", "--set", "train.steps=40",
                      "--set", "data.seq_len=16", "--set", "data.n_steps=512", "--set", "train.batch_size=16",
                      "--set", "model.size=tiny", "--set", "train.val_every=0")
    line = one_line_error(res, "training diverged", "not finite at step", str(run / "summary.json"), codes=(1,))
    assert "logged step 10" in line
    s = strict_load((run / "summary.json").read_text())
    assert s["status"] == "diverged" and s["steps"] == 10
    for args in (["top", str(run), "--once"], ["compare", str(run), str(run), "--json"],
                 ["report", str(run)]):
        out = stride_main(*args)
        assert out.code == 0 and "Traceback" not in out.err, (args, out.err[-2000:])
    top = stride_main("top", str(run), "--once").out
    assert "diverged at step" in top
    strict_load(stride_main("compare", str(run), str(run), "--json").out)


def test_a_diverging_solo_sweep_point_is_a_result_not_a_crash(tmp_path: Path) -> None:
    """Solo points train with the Trainer: one that diverges is recorded as packed points are, the next goes on."""
    from stride.config import load_config
    from stride.sweep.jobs import PackJob, run_job

    base = ["data.n_assets=4", "data.n_steps=512", "data.seq_len=8", "data.horizons=[1]", "train.batch_size=16",
            "train.steps=6", "train.val_every=0", "metrics.progress=false", "metrics.flops=false",
            "metrics.log_every=2", "model.name=mlp", "model.size=tiny"]
    bad = load_config(overrides=[*base, "optim.lr=1e30", "optim.warmup_steps=0", "train.grad_clip=none"])
    good = load_config(overrides=base)
    done = run_job(PackJob(0, ["bad", "good"], [bad, good], solo=True, out=str(tmp_path)))
    s_bad, s_good = done[0]["summary"], done[1]["summary"]
    assert s_bad["status"] == "diverged" and s_bad["final_train_loss"] is None
    assert s_bad["steps"] == 2 and 1 <= s_bad["diverged_at_step"] <= 2  # stopped at the first logged step
    assert s_good["status"] == "done" and s_good["steps"] == 6
