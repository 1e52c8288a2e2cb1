"""metrics.jsonl carries the gradient norm the clipping computed (train.grad_clip set). It was computed every step and
never written, so a user could not see a step's gradient norm (outside audit of the parallel layouts)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from stride.config import load_config
from stride.train.callbacks import Callback
from stride.train.trainer import Trainer

BASE = ["data.n_assets=4", "data.n_steps=512", "data.seq_len=8", "data.horizons=[1]", "train.batch_size=16",
        "train.val_every=0", "metrics.progress=false", "metrics.flops=false", "model.name=mlp", "model.size=tiny",
        "metrics.log_every=1", "train.steps=5", "optim.lr=0.01"]


class NormOfGrads(Callback):
    """The L2 norm of every parameter's gradient, in float64, just before each optimizer step (after clipping has
    run: clipping to 1e9 leaves the gradients as they were)."""

    def __init__(self) -> None:
        self.norm: dict[int, float] = {}

    def before_optimizer_step(self, trainer: Trainer, loss, grad_norm) -> bool:  # noqa: ANN001
        grads = [p.grad.double().flatten() for p in trainer.model.parameters() if p.grad is not None]
        self.norm[trainer.step + 1] = float(torch.linalg.vector_norm(torch.cat(grads)))
        return True


def _logged(run: Path) -> dict[int, float]:
    return {r["step"]: r["grad_norm"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if "grad_norm" in r}


def test_the_logged_grad_norm_is_the_gradients_norm(tmp_path: Path) -> None:
    seen = NormOfGrads()
    Trainer(config=load_config(overrides=[*BASE, "train.grad_clip=1e9"]), out=tmp_path / "run",
            callbacks=[seen]).fit()
    logged = _logged(tmp_path / "run")
    assert sorted(logged) == [1, 2, 3, 4, 5]
    assert all(math.isfinite(v) and v > 0 for v in logged.values())
    assert logged == pytest.approx(seen.norm, rel=1e-5)


def test_no_grad_norm_without_clipping(tmp_path: Path) -> None:
    """Without train.grad_clip nothing computes the norm, and nothing is computed for the log alone."""
    Trainer(config=load_config(overrides=[*BASE, "train.grad_clip=null"]), out=tmp_path / "run").fit()
    assert _logged(tmp_path / "run") == {}
