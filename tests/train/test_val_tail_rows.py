"""`Trainer(val_data=(X, Y))` evaluates every row (audit 9, #9): the rows that do not fill a last batch were skipped,
and with rows in time order they are the most recent ones. Training still drops its short batch."""

from __future__ import annotations

import torch
from torch import nn

from stride import load_config
from stride.data.tensor_batches import TensorBatches
from stride.train.evaluate import validation_loss
from stride.train.trainer import Trainer


def test_validation_covers_the_rows_past_the_last_full_batch() -> None:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g)
    xv, yv = torch.randn(10, 4, generator=g), torch.randn(10, 1, generator=g)
    yv[8:] += 100.0  # the last 2 rows, past batch 4's two full batches: a loss they are left out of is small
    model = nn.Linear(4, 1)
    cfg = load_config(overrides=["train.batch_size=4", "train.val_batches=100", "train.steps=1"])
    tr = Trainer(model, (x, y), (xv, yv), cfg, loss_fn=nn.functional.mse_loss, write_run_dir=False)
    got = validation_loss(tr, tr.model)
    with torch.no_grad():
        want = float(nn.functional.mse_loss(model(xv), yv))
    assert abs(got - want) <= 1e-5 * want


def test_training_batches_stay_full() -> None:
    x, y = torch.zeros(10, 2), torch.zeros(10, 1)
    assert [len(b[0]) for b in TensorBatches(x, y, 4, shuffle=False)] == [4, 4]
    assert [len(b[0]) for b in TensorBatches(x, y, 4, shuffle=False, drop_last=False)] == [4, 4, 2]
