"""LoRA (frozen base weights) and Megatron's block-method partial recompute, against hand computations."""

from __future__ import annotations

import dataclasses

import pytest

from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import PRESETS

HW = load_catalog().get("h100-sxm")
SPEC = PRESETS["llama2-70b"]
EFF = Efficiency()


def _pred(**kw):
    lay = Layout(dp=8, micro_batch=1, recompute="none", framework="megatron", zero=0, **kw)
    return predict(SPEC.with_seq(4096), lay, HW, 8, EFF)


def test_lora_runs_the_backward_without_weight_gradients() -> None:
    full, lora = _pred(), _pred(frozen=True)
    # each linear: forward + dgrad + wgrad at the same cost -> forward + dgrad: 2/3 of the block GEMMs
    assert lora.breakdown_s["gemm"] == pytest.approx(full.breakdown_s["gemm"] * 2 / 3, rel=1e-9)
    # the attention core still runs its backward (the input gradients need it)
    assert lora.breakdown_s["attention"] == pytest.approx(full.breakdown_s["attention"], rel=1e-12)
    # no base-weight optimizer step, no gradient all-reduce of the base weights (latency only)
    assert lora.breakdown_s["optimizer"] == 0.0 and full.breakdown_s["optimizer"] > 0
    assert lora.breakdown_s["dp_comm"] < 1e-3 < full.breakdown_s["dp_comm"]
    # memory: the 16-bit weights only (no fp32 gradients, master weights or Adam moments)
    assert lora.memory_bytes["grads"] == 0.0 and lora.memory_bytes["optimizer"] == 0.0
    assert lora.memory_bytes["params"] == pytest.approx(full.memory_bytes["params"])
    assert lora.tokens_per_s_per_device > full.tokens_per_s_per_device


def test_block_recompute_of_n_layers_costs_n_of_l_blocks() -> None:
    L = SPEC.layers
    none, full = _pred(), _pred().layout
    full = predict(SPEC.with_seq(4096), dataclasses.replace(full, recompute="full"), HW, 8, EFF)
    part = predict(SPEC.with_seq(4096), dataclasses.replace(full.layout, recompute_layers=20), HW, 8, EFF)
    for term in ("gemm", "attention", "elementwise"):
        want = 20 / L * full.breakdown_s[term] + (L - 20) / L * none.breakdown_s[term]
        assert part.breakdown_s[term] == pytest.approx(want, rel=1e-9), term
    # activations: 20 blocks keep their inputs only, the other 60 everything
    acts = part.memory_bytes["activations"]
    assert none.memory_bytes["activations"] > acts > full.memory_bytes["activations"]
    assert "rc-fullx20" in part.layout.short()


def test_recompute_layers_beyond_the_stage_is_every_block() -> None:
    full = predict(SPEC.with_seq(4096), Layout(dp=8, recompute="full"), HW, 8, EFF)
    more = predict(SPEC.with_seq(4096), Layout(dp=8, recompute="full", recompute_layers=500), HW, 8, EFF)
    assert more.step_time_s == pytest.approx(full.step_time_s, rel=1e-12)
