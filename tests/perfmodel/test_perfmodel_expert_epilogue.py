"""GPT-OSS's experts on Megatron-Core without Transformer Engine's op fuser: the eager clamps of the GLU and the fp32
fc2-bias pass on every routed row (kernels.EXPERT_EPILOGUE_BYTES, read from Megatron-Core's code). Read from a row's
words, costed by hand, and checked on the published NeMo 25.11 rows it was written for."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from stride.perfmodel import row_text as rt
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency, shipped_efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.kernels import Costs
from stride.perfmodel.published import row_inputs

CAT = load_catalog()
NEMO = Path(__file__).resolve().parents[2] / "data" / "perfmodel" / "nemo_perf_summary.csv"


def nemo_row(row_id: str) -> dict:
    with NEMO.open(newline="") as fh:
        return next(r for r in csv.DictReader(fh) if r["row_id"] == row_id)


@pytest.mark.parametrize("model, run, want", [
    ("GPT OSS 120B", "Megatron-Bridge perf recipe, alltoall dispatcher", True),
    ("gpt-oss-20b", "Megatron-Core, TE", True),
    ("custom MoE, quick_gelu gated (clamp 7.0), bias in linear layers", "Megatron-Core", True),
    ("GPT OSS 120B", "perf_recipes; _apply_gpt_oss_120b_full_iter_fp8mx_configs", False),  # op fuser on there
    ("GPT OSS 120B", "TE op fuser, NVTE_CUTEDSL_FUSED_GROUPED_MLP=1", False),
    ("gpt-oss-20b", "Primus-Turbo: use_turbo_fused_act_with_probs: true", False),
    ("Qwen3 30B-A3B", "Megatron-Bridge perf recipe", False),
    ("Mixtral 8x7B, clamp of gradients", "Megatron-Core", False),  # a clamp without expert biases
])
def test_read_from_the_words(model: str, run: str, want: bool) -> None:
    assert rt.megatron_eager_expert_epilogue(model, run) is want


def test_a_row_reads_it_only_for_megatron_moe() -> None:
    row = nemo_row("nemo2511-gptoss-120b-gb200-64-bf16")
    got = row_inputs(row, CAT)
    assert got.layout.eager_expert_epilogue and any("fc2-bias" in n for n in got.notes)
    fsdp = row_inputs({**row, "framework": "NeMo AutoModel (PyTorch FSDP2)"}, CAT)
    assert fsdp.layout is not None and not fsdp.layout.eager_expert_epilogue
    assert not row_inputs(nemo_row("nemo2511-qwen3-235b-gb200-256-bf16"), CAT).layout.eager_expert_epilogue
    assert not row_inputs(nemo_row("nemo2608-gptoss-120b-gb200-64-mxfp8"), CAT).layout.eager_expert_epilogue


def test_the_bytes_by_hand() -> None:
    """28 B per fc1-output column and 50 B per hidden value a routed row, over forward and backward (block_time's
    1 + 2): a third of it in the forward elementwise count, times top_k."""
    got = row_inputs(nemo_row("nemo2511-gptoss-120b-gb200-64-bf16"), CAT)
    spec, lay, hw = got.spec, got.layout, got.hardware
    off = Costs(hw, Efficiency(), dataclasses.replace(lay, eager_expert_epilogue=False), spec)
    on = Costs(hw, Efficiency(), lay, spec)
    extra = on.elementwise_per_token(1)[1] - off.elementwise_per_token(1)[1]
    assert spec.top_k == 4 and spec.expert_ffn == 2880 and spec.hidden == 2880
    assert extra == pytest.approx(4 * (28 * 2880 + 50 * 2880) / 3)


def test_the_step_it_adds_is_a_fifth_of_the_gb200_step() -> None:
    """The research estimate (Megatron-LM d98e8a64dd): ~220-275 KB a routed row, about +25-30 % of a GB200 step.
    Costed at the shipped factors, it is between a tenth and a third of the step without it."""
    got = row_inputs(nemo_row("nemo2511-gptoss-120b-gb200-64-bf16"), CAT)
    eff = shipped_efficiency()
    on = predict(got.spec, got.layout, got.hardware, got.global_batch, eff).step_time_s
    off = predict(got.spec, dataclasses.replace(got.layout, eager_expert_epilogue=False), got.hardware,
                  got.global_batch, eff).step_time_s
    assert 0.1 < on / off - 1 < 0.35
