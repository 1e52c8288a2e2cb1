"""A sweep point's validation covers the rows past the last full batch, as its solo run does (audit 9 review):
the pack dropped them, so the two reported different validation losses."""

from __future__ import annotations

import pytest
import torch
from sweep_fixtures import config, solo_on_tensors, tensor_data

from stride.sweep.packed_train import PackedTrainer


def test_packed_validation_keeps_the_tail_rows_as_solo_does() -> None:
    cfg = config("mlp", "train.val_batches=10")
    bs = cfg.train.batch_size
    train = tensor_data(cfg, 256, 0, torch.float64)
    val = tensor_data(cfg, 2 * bs + 5, 1, torch.float64)  # 5 rows past the last full batch
    val[1][-5:] += 50.0  # weight on the tail: a validation that drops it reads far lower
    pt = PackedTrainer([cfg], train_data=train, val_data=val, dtype=torch.float64)
    pt.fit()
    ref = solo_on_tensors(cfg, train, val, torch.float64)
    got = [h["val_loss"] for h in pt.records[0].history if "val_loss" in h]
    want = [h["val_loss"] for h in ref.history if "val_loss" in h]
    assert got and got == pytest.approx(want, rel=1e-9)
