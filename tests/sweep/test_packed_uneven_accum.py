"""A packed model trains a batch that grad_accum does not divide as its solo run does (every row, one step).

The Trainer splits such a batch (an iterable's short last batch) into nearly equal micro-batches weighted by their
rows (1a86e84); the pack cut it into grad_accum slices of rows // grad_accum, dropping the remainder, and a batch
of fewer rows than grad_accum trained empty slices: a NaN loss, the packed model marked diverged where its solo run
trained on. Float64 throughout, so any difference is the rule, not rounding."""

from __future__ import annotations

import copy
import math

import torch
from sized_batches import SizedBatches
from sweep_fixtures import config, max_param_diff, reference_loss, tensor_data

from stride.models.registry import build_model
from stride.sweep.packed_train import PackedTrainer
from stride.train.device import seed_everything
from stride.train.trainer import Trainer

FP64_TOL = 1e-10


def _batches(cfg, sizes: list[int]) -> SizedBatches:
    """Float64 batches of the given sizes from the sweep tests' data, the same every epoch."""
    return SizedBatches.slices(*tensor_data(cfg, sum(sizes), 0, torch.float64), sizes)


def _solo(cfg, train, val) -> Trainer:
    seed_everything(cfg.train.seed)
    x0, y0 = train.items[0]
    model = build_model(cfg.model, x0.shape[-1], x0.shape[1], y0.shape[-1]).to(torch.float64)
    trainer = Trainer(model=model, train_data=train, val_data=val, config=copy.deepcopy(cfg),
                      loss_fn=reference_loss(cfg), write_run_dir=False)
    trainer.fit()
    return trainer


def test_a_pack_trains_every_row_of_batches_grad_accum_does_not_divide() -> None:
    common = ("train.grad_accum=4", "train.batch_size=16", "train.steps=6", "optim.warmup_steps=0")
    cfgs = [config("mlp", *common, "train.seed=0"), config("mlp", *common, "train.seed=1", "optim.lr=0.01")]
    train = _batches(cfgs[0], [16, 15, 3])  # 15: not divided by 4; 3: fewer rows than micro-batches
    val = tensor_data(cfgs[0], 32, 1, torch.float64)
    pt = PackedTrainer(cfgs, train_data=train, val_data=val, dtype=torch.float64)
    pt.fit()
    for i, c in enumerate(cfgs):
        s = pt.records[i].summary
        assert s.get("stopped") != "diverged" and all(
            math.isfinite(h["loss"]) for h in pt.records[i].history if "loss" in h), (i, s)
        ref = _solo(c, train, val)
        assert max_param_diff(ref.model.state_dict(), pt.model.state_dict_of(i)) < FP64_TOL, i
