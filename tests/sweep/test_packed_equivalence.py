"""Each packed model equals its own solo `stride train` run: float64 near-exactly, float32 within rounding.

The float64 runs use explicit (X, Y) tensors (the Trainer shuffles them by `train.seed`, so models with
different seeds also read different data orders: the per-model stream path), the float32 runs build the
synthetic market from `[data]` exactly as `stride train` does (one shared gather per batch).
"""

from __future__ import annotations

import math

import pytest
import torch
from sweep_fixtures import (
    FP32_TOL,
    WORKLOADS,
    config,
    max_param_diff,
    solo,
    solo_on_tensors,
    tensor_data,
)

from stride.config import config_hash
from stride.config.errors import ConfigError
from stride.sweep.grouped_lstm import LSTM_MODE
from stride.sweep.packed_train import PackedTrainer

# seed, learning rate, warm-up, weight decay, betas and clipping differ inside one pack
PACK = [
    ("train.seed=0",),
    ("train.seed=1", "train.grad_clip=0.05"),
    ("train.seed=0", "optim.lr=3e-3", "optim.warmup_steps=3", "optim.weight_decay=0.1", "optim.betas=[0.8, 0.99]",
     "train.grad_clip=none"),
]
FP64_TOL = 1e-10  # measured up to 4.4e-12 (LSTM, this PACK, 8 steps)
# The transformer's RMSNorm and RoPE compute in float32 by design (layers.py), so a float64 run of it still
# rounds to float32 inside: one rounding flip from another summation order moves a parameter ~1e-9.
FP64_TOL_WORKLOAD = {"ts_transformer": 1e-8}


def _packed(cfgs, **kw) -> PackedTrainer:
    pt = PackedTrainer(cfgs, **kw)
    pt.fit()
    return pt


def _compare_history(solo_hist, packed_hist, rel: float) -> None:
    """Logged losses, validation losses and learning rates, step by step. The Trainer sums a step's loss
    into a float32 scalar, so its logged training loss is float32 even in a float64 run."""
    assert [h["step"] for h in solo_hist] == [h["step"] for h in packed_hist]
    for a, b in zip(solo_hist, packed_hist, strict=True):
        for key, tol in (("loss", max(rel, 1e-7)), ("val_loss", rel), ("lr", 1e-15)):
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=tol, abs=tol), (key, a, b)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_float64_packed_equals_solo(workload):
    cfgs = [config(workload, *o) for o in PACK]
    train, val = tensor_data(cfgs[0], 256, 0, torch.float64), tensor_data(cfgs[0], 64, 1, torch.float64)
    pt = _packed(cfgs, train_data=train, val_data=val, dtype=torch.float64)
    assert len(pt.data.streams) == 2  # seeds 0 and 1 read different orders
    for i, c in enumerate(cfgs):
        ref = solo_on_tensors(c, train, val, torch.float64)
        diff = max_param_diff(ref.model.state_dict(), pt.model.state_dict_of(i))
        tol = FP64_TOL_WORKLOAD.get(workload, FP64_TOL)
        assert diff < tol, (workload, i, diff)
        _compare_history(ref.history, pt.records[i].history, tol)


@pytest.mark.parametrize("workload", ["mlp", "lstm"])
def test_float64_pack_on_two_lanes_equals_solo(workload):
    """With 2 torch threads the pack's per-model LSTM calls and AdamW rows run on two single-threaded lanes
    (stride.sweep.model_lanes); each model still equals its solo run."""
    cfgs = [config(workload, *o, "train.threads=2") for o in PACK]
    train, val = tensor_data(cfgs[0], 256, 0, torch.float64), tensor_data(cfgs[0], 64, 1, torch.float64)
    pt = _packed(cfgs, train_data=train, val_data=val, dtype=torch.float64)
    assert torch.get_num_threads() == 2
    for i, c in enumerate(cfgs):
        ref = solo_on_tensors(c, train, val, torch.float64)
        assert max_param_diff(ref.model.state_dict(), pt.model.state_dict_of(i)) < FP64_TOL, (workload, i)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_float32_packed_equals_solo_stride_train(workload):
    cfgs = [config(workload, *o) for o in PACK]
    pt = _packed(cfgs)
    assert pt.data.shared  # one data config: one gather per batch for the whole pack
    for i, c in enumerate(cfgs):
        ref = solo(c)
        diff = max_param_diff(ref.model.state_dict(), pt.model.state_dict_of(i))
        assert diff < FP32_TOL, (workload, i, diff)
        _compare_history(ref.history, pt.records[i].history, 1e-4)
        s = pt.records[i].summary
        assert s["final_val_loss"] == pytest.approx(ref.history[-1]["val_loss"], rel=1e-4)
        assert s["config_hash"] == config_hash(c)  # the same experiment id as the solo run's summary


def test_grouped_lstm_pack_float64():
    """The grouped-gates LSTM (the GPU path) in a whole training run, not just one call."""
    cfgs = [config("lstm", *o) for o in PACK]
    train, val = tensor_data(cfgs[0], 256, 0, torch.float64), tensor_data(cfgs[0], 64, 1, torch.float64)
    LSTM_MODE["mode"] = "grouped"
    try:
        pt = _packed(cfgs, train_data=train, val_data=val, dtype=torch.float64)
    finally:
        LSTM_MODE["mode"] = "auto"
    for i, c in enumerate(cfgs):
        ref = solo_on_tensors(c, train, val, torch.float64)
        assert max_param_diff(ref.model.state_dict(), pt.model.state_dict_of(i)) < FP64_TOL


@pytest.mark.parametrize("extra", [
    ("optim.name=sgd", "optim.momentum=0.9"),
    ("optim.name=sgd", "optim.momentum=0.0", "optim.weight_decay=0.0"),
    ("model.loss=huber",),
    ("model.loss=quantile",),
    ("train.grad_accum=2",),
    ("optim.impl=foreach",),
], ids=["sgd-momentum", "sgd-plain", "huber", "quantile", "grad-accum", "adamw-foreach"])
def test_float64_variants(extra):
    per_model = [("train.seed=0", "model.huber_delta=0.5", "model.quantiles=[0.1, 0.5, 0.9]"),
                 ("train.seed=1", "optim.lr=0.01", "model.huber_delta=2.0", "model.quantiles=[0.2, 0.5, 0.7]")]
    cfgs = [config("mlp", *extra, *o) for o in per_model]
    train, val = tensor_data(cfgs[0], 256, 0, torch.float64), tensor_data(cfgs[0], 64, 1, torch.float64)
    pt = _packed(cfgs, train_data=train, val_data=val, dtype=torch.float64)
    for i, c in enumerate(cfgs):
        ref = solo_on_tensors(c, train, val, torch.float64)
        assert max_param_diff(ref.model.state_dict(), pt.model.state_dict_of(i)) < FP64_TOL, (extra, i)
        _compare_history(ref.history, pt.records[i].history, 1e-12)


def test_per_model_data_seed_reads_its_own_data():
    """data.seed differs: each model its own synthetic market and order (separate gathers), still = solo."""
    cfgs = [config("mlp", "data.seed=0"), config("mlp", "data.seed=3", "train.seed=2")]
    pt = _packed(cfgs)
    assert len(pt.data.streams) == 2 and not pt.data.shared
    for i, c in enumerate(cfgs):
        assert max_param_diff(solo(c).model.state_dict(), pt.model.state_dict_of(i)) < FP32_TOL


def test_target_and_step_budget_stop_each_model_where_its_solo_run_stops():
    """Model 0 stops at its target (as solo breaks there), model 1 after its own fewer steps."""
    probe = solo(config("mlp", "train.steps=12"))
    vals = [h["val_loss"] for h in probe.history if "val_loss" in h]
    target = vals[0] + 1e-4  # reached at the first validation (step 4), by the solo run and the packed one
    cfgs = [config("mlp", "train.steps=12", f"train.target_val_loss={target}"), config("mlp", "train.steps=6")]
    pt = _packed(cfgs)
    s0, s1 = pt.records[0].summary, pt.records[1].summary
    assert (s0["status"], s0["steps"], s1["status"], s1["steps"]) == ("target", 4, "done", 6)
    assert s0["time_to_target_s"] is not None and s0["time_to_target_s"] > 0
    for i, c in enumerate(cfgs):
        ref = solo(c)
        assert len(ref.history) == len(pt.records[i].history)
        assert max_param_diff(ref.model.state_dict(), pt.model.state_dict_of(i)) < FP32_TOL


def test_a_diverging_model_is_masked_and_leaves_the_others_untouched():
    cfgs = [config("mlp", "train.seed=0"), config("mlp", "train.seed=1", "optim.lr=1e30", "train.grad_clip=none",
                                                   "optim.warmup_steps=0"),
            config("mlp", "train.seed=2")]
    train, val = tensor_data(cfgs[0], 256, 0, torch.float64), tensor_data(cfgs[0], 64, 1, torch.float64)
    pt = _packed(cfgs, train_data=train, val_data=val, dtype=torch.float64)
    bad = pt.records[1].summary
    assert bad["status"] == "diverged" and bad["diverged_at_step"] is not None and bad["final_train_loss"] is None
    assert all(math.isfinite(v.double().abs().max().item()) for v in pt.model.state_dict_of(1).values())
    for i in (0, 2):
        ref = solo_on_tensors(cfgs[i], train, val, torch.float64)
        assert max_param_diff(ref.model.state_dict(), pt.model.state_dict_of(i)) < FP64_TOL
        assert pt.records[i].summary["status"] == "done"


def test_dropout_rates_per_model():
    """Rate 0 beside rate 0.5 in one pack: the rate-0 model is still its solo run exactly (float64); the other
    model is trained with dropout (its result differs from its rate-0 twin)."""
    cfgs = [config("mlp", "train.seed=0"), config("mlp", "train.seed=0", "model.dropout=0.5")]
    train, val = tensor_data(cfgs[0], 256, 0, torch.float64), tensor_data(cfgs[0], 64, 1, torch.float64)
    pt = _packed(cfgs, train_data=train, val_data=val, dtype=torch.float64)
    ref = solo_on_tensors(cfgs[0], train, val, torch.float64)
    assert max_param_diff(ref.model.state_dict(), pt.model.state_dict_of(0)) < FP64_TOL
    assert max_param_diff(pt.model.state_dict_of(0), pt.model.state_dict_of(1)) > 1e-4


@pytest.mark.parametrize("name", ["adamw8bit", "adafactor", "adamw_triton"])
def test_unsupported_optimizers_are_refused_in_one_line(name):
    with pytest.raises(ConfigError, match=f"`optim.name` = '{name}': packed training supports adamw, sgd") as e:
        PackedTrainer([config("mlp", f"optim.name={name}")])
    assert "\n" not in str(e.value)


def test_shape_changing_keys_cannot_share_a_pack():
    with pytest.raises(ConfigError, match=r"differ in model\.d_model"):
        PackedTrainer([config("mlp"), config("mlp", "model.d_model=64")])


def test_a_data_source_drawing_from_the_global_generator_is_reported():
    with pytest.warns(UserWarning, match="draws from torch's global generator"):
        PackedTrainer([config("mlp", "data.source=sweep_fixtures:drawing_source")])


@pytest.mark.parametrize("workload", WORKLOADS)
def test_bf16_packed_agrees_with_bf16_solo(workload):
    """bf16 autocast rounds each op: packed and solo round batched and single GEMMs differently, so the
    agreement is bf16's (measured after 8 steps: parameters within 2.7e-3, validation losses within 2e-4)."""
    cfgs = [config(workload, "train.precision=bf16", f"train.seed={s}") for s in (0, 1)]
    pt = _packed(cfgs)
    for i, c in enumerate(cfgs):
        ref = solo(c)
        assert max_param_diff(ref.model.state_dict(), pt.model.state_dict_of(i)) < 1e-2
        assert pt.records[i].history[-1]["val_loss"] == pytest.approx(ref.history[-1]["val_loss"], rel=2e-3)
