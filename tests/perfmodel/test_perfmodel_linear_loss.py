"""The loss a published row ran, read from its words, and what it holds in memory.

Round 36 (prime-rl's fused LM head, Liger's fused linear cross-entropy, Cut Cross-Entropy) read 70 % over the measured
memory: such a loss never holds the logits, and the model kept 4 bytes a logit (bf16 logits and their gradient).
Rows that name Liger as off, or as the source of the comparison, read as fused before (round 30's "Liger-Kernel OFF"
baselines, 59 % over on memory)."""

from __future__ import annotations

import dataclasses

import pytest

from stride.perfmodel.frameworks import fused_loss, linear_loss
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.layout import Layout
from stride.perfmodel.memory_model import predict_memory
from stride.perfmodel.model_spec import TransformerSpec
from stride.perfmodel.published import row_inputs
from tests.perfmodel.test_perfmodel_row_variants import BASE


@pytest.mark.parametrize(
    ("text", "fused", "linear"),
    [
        ("Liger-Kernel ON: Liger RoPE, RMSNorm, SwiGLU MLP and fused linear cross entropy", True, True),
        ("Liger kernels (RoPE, SwiGLU, RMSNorm patched; loss = LigerFusedLinearCrossEntropyLoss)", True, True),
        ("HF Trainer, liger-kernel; flash-attn 2", True, True),  # the Trainer's use_liger_kernel: FLCE by default
        ("Liger-Kernel ON (v0.3)", True, True),  # a version in brackets is not a list of kernels
        ("LM head and loss through its fused LM head with chunked loss", True, True),
        ("loss: Apple Cut Cross-Entropy (cce_kahan_full_c)", True, True),
        ("Liger-Kernel OFF (stock HF modeling code)", False, False),
        ("use_liger_kernel false", False, False),
        ("the foak (non-Liger) run sits at the memory limit", False, False),
        ("Axolotl: Liger plugin (glu activation, rms_norm, layer_norm), adamw_torch_fused", False, False),
        ("torchtune + chunked cross-entropy (CEWithChunkedOutputLoss)", True, False),  # keeps the bf16 logits
        ("llm.c, fused classifier", True, False),
        ("plain PyTorch, eager", False, False),
        # review: a "no" after Liger that is not its switch, and Liger's plain cross-entropy (the logits are held)
        ("Liger kernel, no activation checkpointing", True, True),
        ("HF Trainer + Liger, no compile", True, True),
        ("liger_kernel: false", False, False),
        ("Liger (rms_norm, rope, CrossEntropy)", True, False),
    ],
)
def test_the_loss_is_read_from_the_words(text: str, fused: bool, linear: bool) -> None:
    assert (fused_loss(text), linear_loss(text)) == (fused, linear)


def test_the_source_cell_does_not_set_the_loss() -> None:
    """The Liger-Kernel README's baseline run names Liger in `source` only: it ran the model's own loss."""
    row = {**BASE, "source": "linkedin/Liger-Kernel README.md benchmark", "framework": "HF Trainer, FSDP1; Liger OFF"}
    inp = row_inputs(row, load_catalog())
    assert inp.reason is None, inp.reason
    assert (inp.layout.fused_loss, inp.layout.linear_loss) == (False, False)
    on = row_inputs({**row, "framework": "HF Trainer, FSDP1; Liger-Kernel ON"}, load_catalog())
    assert (on.layout.fused_loss, on.layout.linear_loss) == (True, True)


def test_a_linear_loss_holds_a_chunk_not_the_logits() -> None:
    """Qwen3-0.6B at 65,536 tokens: the bf16 logits and their gradient are 65,536 x 151,936 x 4 bytes (39.8 GB); the
    fused LM head holds one fp32 chunk about a hidden state's size and the input's gradient (65,536 x 1,024 x 6)."""
    spec = TransformerSpec(layers=28, hidden=1024, heads=16, kv_heads=8, ffn=3072, act="swiglu", vocab=151936,
                           seq=65536)
    hw = load_catalog().get("h100-sxm")
    fused = Layout(framework="fsdp2", fused_loss=True)
    linear = dataclasses.replace(fused, linear_loss=True)
    devices = [(28, 0.6e9, 1.0, True)]
    a = predict_memory(spec, fused, hw, devices, 4, True)
    b = predict_memory(spec, linear, hw, devices, 4, True)
    held = a.components["buffers"] - b.components["buffers"]
    assert held == pytest.approx(65536 * 151936 * 4 - 65536 * 1024 * 6)
