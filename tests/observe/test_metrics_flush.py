"""metrics.jsonl is buffered: lines reach the file within FLUSH_S, at every flush (a checkpoint calls it) and at
close; a checkpointed run's file holds every step its last checkpoint holds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import stride.metrics.run_dir as run_dir_mod
from stride.metrics.run_dir import RunDir


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def test_lines_wait_at_most_flush_s_and_are_all_there_after_flush_and_close(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_dir_mod, "FLUSH_S", 3600.0)  # nothing flushed by time in this test
    run = RunDir(tmp_path / "run")
    for step in range(1, 4):
        run.log({"step": step, "loss": 1.0 / step})
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == ""  # still in the buffer
    run.flush()
    assert [r["step"] for r in _lines(tmp_path / "run")] == [1, 2, 3]
    run.log({"step": 4, "loss": 0.25})
    monkeypatch.setattr(run_dir_mod, "FLUSH_S", 0.0)  # the time bound reached: the next line flushes
    run.log({"step": 5, "loss": 0.2})
    assert [r["step"] for r in _lines(tmp_path / "run")] == [1, 2, 3, 4, 5]
    monkeypatch.setattr(run_dir_mod, "FLUSH_S", 3600.0)
    run.log({"step": 6, "loss": 0.1})
    run.close()
    assert [r["step"] for r in _lines(tmp_path / "run")] == [1, 2, 3, 4, 5, 6]


def test_a_checkpoint_flushes_the_lines_of_the_steps_it_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checkpoint"))
    from ckpt_helpers import ckpt_config

    from stride.checkpoint.callback import CheckpointCallback
    from stride.train.trainer import Trainer

    monkeypatch.setattr(run_dir_mod, "FLUSH_S", 3600.0)
    seen: list[tuple[int, list[int]]] = []
    real = CheckpointCallback.save

    def save(self, trainer, **kwargs):  # noqa: ANN001, ANN003, ANN202  (final=, summary=: as the callback passes)
        out = real(self, trainer, **kwargs)
        seen.append((trainer.step, [r["step"] for r in _lines(trainer.run_dir.path) if "loss" in r]))
        return out

    monkeypatch.setattr(CheckpointCallback, "save", save)
    cfg = ckpt_config("train.steps=12", "checkpoint.every=4", "metrics.log_every=2", "checkpoint.async_save=false")
    Trainer(config=cfg, out=tmp_path / "run").fit()
    assert seen and all(logged and logged[-1] == step for step, logged in seen), seen
