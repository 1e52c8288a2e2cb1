"""QLoRA (4-bit frozen base weights), transformers' dense Llama 4 MoE, and checkpoints offloaded to the host, as the
performance model reads and costs them: the words, the bytes by hand, and the published rows of round 34 that showed
them missing (Answer.AI's fsdp_qlora, Axolotl's Llama 4 examples; data/perfmodel/holdout/round34_finetune.csv)."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from stride.config.errors import ConfigError
from stride.perfmodel import qlora
from stride.perfmodel import row_text as rt
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.flops import blocks_params, layer_gemms, total_params
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.kernels import Costs
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import PRESETS
from stride.perfmodel.published import row_inputs

CAT = load_catalog()
ROUND34 = Path(__file__).resolve().parents[2] / "data" / "perfmodel" / "holdout" / "round34_finetune.csv"


def row(row_id: str) -> dict:
    with ROUND34.open(newline="") as fh:
        return next(r for r in csv.DictReader(fh) if r["row_id"] == row_id)


@pytest.mark.parametrize("text, want", [
    ("QLoRA: frozen base weights NF4 4-bit (bitsandbytes Linear4bit)", (True, False)),
    ("load_in_4bit, bnb_4bit_use_double_quant: true", (True, True)),
    ("QLoRA, double quantization", (True, True)),
    ("QLoRA, bnb_4bit_use_double_quant False", (True, False)),
    ("LoRA on frozen bf16 base weights", (False, False)),
    ("bf16; optimizer adamw_torch_4bit", (False, False)),  # a 4-bit optimizer, not 4-bit weights
    ("AnswerDotAI fsdp_qlora train.py, LoRA", (False, False)),  # the program's name, not the run's weights
])
def test_four_bit_base_from_the_words(text: str, want: tuple[bool, bool]) -> None:
    assert rt.four_bit_base(text) == want


def test_a_qlora_row_is_frozen_and_4bit_and_notes_about_qlora_do_not_make_a_full_run_frozen() -> None:
    q = row_inputs(row("r34f_fq3090_l7b_qlora_bs10"), CAT)
    assert q.layout.frozen and q.layout.base_4bit and any("QLoRA" in n for n in q.notes)
    lora = row_inputs(row("r34f_fq3090_l7b_lora_bs6"), CAT)  # the same program, bf16 base weights
    assert lora.layout.frozen and not lora.layout.base_4bit
    full = {**row("r34f_anys_axolotl_full"), "notes": "the QLoRA tables (4-bit base weights) are not transcribed"}
    assert not row_inputs(full, CAT).layout.frozen  # round 22's Axolotl rows say so in their notes


def test_the_stored_bytes_by_hand() -> None:
    """NF4: 0.5 B codes + an fp32 absmax per 64 = 0.5625 B; double-quantised 0.5 + 1/64 + 4/16384 B. Blocks only:
    Llama 2 7B's embeddings and head (2 x 32000 x 4096) stay 16-bit."""
    assert qlora.stored_bytes(False) == pytest.approx(0.5625)
    assert qlora.stored_bytes(True) == pytest.approx(0.5 + 1 / 64 + 4 / 16384)
    spec = PRESETS["llama2-7b"]
    q = blocks_params(spec) / total_params(spec)
    assert 0.95 < q < 0.97
    assert qlora.frozen_bytes_per_param(spec, False) == pytest.approx(q * 0.5625 + (1 - q) * 2)


def test_memory_and_time_of_4bit_weights_by_hand() -> None:
    """One H100, Llama 2 7B, LoRA on attention, no recompute: the weights' bytes fall from 2 to the mean 4-bit
    bytes a parameter, and each block linear costs a dequantisation (read 0.5625 B, write 2 B a parameter) in the
    forward and again in the backward."""
    hw, spec, eff = CAT.get("h100-sxm"), PRESETS["llama2-7b"], Efficiency()
    lay = Layout(dp=1, micro_batch=1, framework="fsdp2", precision="bf16", frozen=True, lora_rank=16)
    q4 = dataclasses.replace(lay, base_4bit=True)
    a, b = predict(spec, lay, hw, 1, eff), predict(spec, q4, hw, 1, eff)
    saved = total_params(spec) * (2 - qlora.frozen_bytes_per_param(spec, False))
    assert a.memory_bytes["params"] - b.memory_bytes["params"] == pytest.approx(saved, rel=1e-9)
    lin = [g for g in layer_gemms(spec, spec.seq) if g.name not in ("attn_scores", "attn_values")]
    per_use = sum(g.batch * g.k * g.n for g in lin) * qlora.dequant_bytes_per_use(False)
    deq = spec.layers * 2 * Costs(hw, eff, q4, spec).memory(per_use)
    assert b.breakdown_s["lora"] - a.breakdown_s["lora"] == pytest.approx(deq, rel=1e-6)


@pytest.mark.parametrize("model, run, want", [
    ("Llama-4-Scout-17B-16E", "Axolotl (HF Trainer): Liger plugin, flash attention 2", True),
    ("Llama 4 Maverick", "Hugging Face transformers + accelerate FSDP", True),
    ("Llama-4-Scout-17B-16E", "torchtitan, FSDP2", False),
    ("Llama-4-Scout-17B-16E", "Unsloth (HF transformers), grouped GEMM MoE", False),
    ("Mixtral 8x7B", "Hugging Face transformers", False),  # a loop over the experts a token is routed to
])
def test_dense_dispatch_from_the_words(model: str, run: str, want: bool) -> None:
    assert rt.hf_dense_experts(model, run) is want


def test_dense_dispatch_costs_every_expert_on_every_token() -> None:
    scout = row_inputs(row("r34f_axl_scout_1xh100_fa2"), CAT)
    assert scout.spec.experts == 16 and scout.spec.top_k == 1 and scout.spec.capacity == 16
    routed = dataclasses.replace(scout.spec, capacity=1.0)
    work = {g.name: g.flops for g in layer_gemms(scout.spec, 4096, moe=True)}
    base = {g.name: g.flops for g in layer_gemms(routed, 4096, moe=True)}
    assert work["expert_in"] == pytest.approx(16 * base["expert_in"])
    with pytest.raises(ConfigError, match=r"capacity factor must be in \[0.5, 16\]"):
        dataclasses.replace(routed, capacity=17.0)


def test_checkpoints_offloaded_to_the_host_are_full_recompute() -> None:
    text = "full activation checkpointing with CPU offload of checkpoints (gradient_checkpointing: offload)"
    assert rt.recompute(text) == "full"
    assert rt.offload_switches("", text)[2] == -1  # and every block's saved input goes to the host


def test_round34_rows_it_was_made_for() -> None:
    """What the three readings changed, on the rows that showed them missing (held out; scored blind before):
    Scout's QLoRA on one H100 read 7.9x fast with 214 GiB (bf16 weights, top-1 expert work); 68.5 GB measured."""
    scout = row_inputs(row("r34f_axl_scout_1xh100_fa2"), CAT)
    p = predict(scout.spec, scout.layout, scout.hardware, scout.global_batch, Efficiency())
    assert scout.layout.recompute == "full" and scout.layout.base_4bit
    assert 55 < p.peak_mem_gib < 85
    assert 0.3 < 546.0 / p.tokens_per_s_per_device < 3
