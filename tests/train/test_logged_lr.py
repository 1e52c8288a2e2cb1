"""metrics.jsonl's `lr` is the rate the step ran at. It logged the optimizer's `lr` after `scheduler.step()`, the
next step's (audit 6: step 1 of a 20-step warm-up logged 1e-4; it trained at 5e-5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stride.config import load_config
from stride.train.callbacks import Callback
from stride.train.trainer import Trainer

BASE = ["data.n_assets=4", "data.n_steps=512", "data.seq_len=8", "data.horizons=[1]", "train.batch_size=16",
        "train.val_every=0", "metrics.progress=false", "metrics.flops=false", "model.name=mlp", "model.size=tiny",
        "metrics.log_every=1", "train.steps=6", "optim.warmup_steps=4", "optim.lr=0.001"]


class LrAtStep(Callback):
    """The optimizer's lr just before each optimizer step runs: what the step trains at."""

    def __init__(self) -> None:
        self.lr: dict[int, float] = {}

    def before_optimizer_step(self, trainer: Trainer, loss, grad_norm) -> bool:  # noqa: ANN001
        self.lr[trainer.step + 1] = float(trainer.optimizer.param_groups[0]["lr"])
        return True


def test_the_logged_lr_is_the_one_the_step_trained_at(tmp_path: Path) -> None:
    seen = LrAtStep()
    Trainer(config=load_config(overrides=BASE), out=tmp_path / "run", callbacks=[seen]).fit()
    logged = {r["step"]: r["lr"] for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
              if "lr" in r}
    assert logged[1] == pytest.approx(0.001 / 4) and logged[4] == pytest.approx(0.001)  # warm-up: (k + 1) / 4
    assert logged == pytest.approx(seen.lr, rel=1e-12)
