"""What the round-11 blind test found the model misreading (docs/perfmodel.md, "Blind test (round 11)"): each
reading is checked on the text as the sources wrote it."""

from __future__ import annotations

import pytest

from stride.perfmodel import row_text as rt
from stride.perfmodel.frameworks import fused_loss
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.precision import recipe_from_text
from stride.perfmodel.published import row_inputs


def _llama8b_row(**over: str) -> dict:
    row = {"row_id": "t", "model": "Llama 3.1 8B", "arch": "llama", "params_b": "8", "layers": "32",
           "hidden": "4096", "heads": "32", "kv_heads": "8", "ffn_hidden": "14336", "ffn_act": "swiglu",
           "vocab": "128256", "seq_len": "8192", "global_batch_seqs": "128", "micro_batch": "1",
           "gpu": "H100 SXM 80GB", "num_gpus": "8", "gpus_per_node": "8", "tp": "1", "pp": "1", "dp": "4",
           "cp": "2", "zero_or_fsdp": "distributed optimizer", "recompute": "none", "precision": "bf16",
           "framework": "NeMo 24.12 (mcore, Transformer Engine)"}
    return {**row, **over}


@pytest.mark.parametrize(("arch", "attention"), [
    # NeMo recipes: Transformer Engine's cuDNN fused attention on, its flash backend off: still a fused kernel
    ("Llama 3.1 8B; fused attention (NVTE_FUSED_ATTN=1, NVTE_FLASH_ATTN=0)", "flash"),
    ("Llama 3.1 8B; NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=1", "flash"),
    ("Llama 3.1 8B; cuDNN fused attention; USE_FLASH_ATTN=0", "flash"),  # materialised without the cuDNN words
    # negated, or beside materialised scores: not a fused kernel (the review's cases)
    ("Llama 3.1 8B; non-fused attention, materialized scores", "materialized"),
    ("Llama 3.1 8B; fused attention off, materialized scores", "materialized"),
    ("Llama 3.1 8B; no fused attention, no flash", "materialized"),
    ("Llama 3.1 8B; fused attention disabled, USE_FLASH_ATTN=0", "materialized"),
    # both of Transformer Engine's fused backends off: TE's unfused path materialises the scores
    ("Llama 3.1 8B; NVTE_FLASH_ATTN=0 NVTE_FUSED_ATTN=0", "materialized"),
    ("Llama 3.1 8B; unfused attention, USE_FLASH_ATTN=0", "materialized"),
])
def test_cudnn_fused_attention_is_a_fused_kernel(arch: str, attention: str) -> None:
    assert row_inputs(_llama8b_row(arch=arch), load_catalog()).layout.attention == attention


@pytest.mark.parametrize(("text", "fused"), [
    ("llm.c train_gpt2.cu (cuBLASLt, cuDNN flash attention), fused classifier, AdamW", True),
    ("Liger fused linear cross entropy", True),
    ("PyTorch DDP, F.cross_entropy", False),
])
def test_llmc_fused_classifier_is_a_fused_loss(text: str, fused: bool) -> None:
    assert fused_loss(text) is fused


def test_xielu_is_an_elementwise_activation_not_gated() -> None:
    act, notes = rt.activation("xIELU", "Apertus 8B: xIELU activation (not gated)")
    assert act == "gelu" and "not gated" in notes[0]
    with pytest.raises(ValueError, match="is not modelled"):
        rt.activation("mystery-glu", "")


@pytest.mark.parametrize(("text", "expect"), [
    # OLMo-core's config object built switched off: the run is bf16 (Olmo 3 rows had been predicted as FP8)
    ("bfloat16 (Sec. 3.2); Float8Config(enabled=False) in script", (None, "")),
    ("bf16; float8_config: enabled: false", (None, "")),
    # OLMo-core's scripts as written, `enabled` among other arguments (the review's cases)
    ("float8_config=Float8Config(enabled=False)", (None, "")),
    ("Float8Config(compile=compile, enabled=False)", (None, "")),
    ("Float8Config(ao=AOFloat8LinearConfig.recommended(), enabled=False)", (None, "")),
    ("float8: {enabled: false}", (None, "")),
    ("Float8Config(enabled=True, ao=AOFloat8LinearConfig.recommended())", ("fp8", "tensorwise")),
])
def test_a_float8_config_built_off_is_not_fp8(text: str, expect: tuple) -> None:
    assert recipe_from_text(text.lower()) == expect


@pytest.mark.parametrize("text", ["GH200 144GB 4.9TB/s", "GH200 96GB", "NVIDIA Grace Hopper superchip"])
def test_a_gh200_can_be_described(text: str) -> None:
    """The catalog's own advice ("describe it, e.g. 'GH200 144GB 4.9TB/s'") was refused as unknown hardware."""
    from stride.perfmodel.hw_text import resolve

    hw, _ = resolve(text, load_catalog())
    assert hw.name.startswith("gh200") and hw.peak_flops("bf16") == load_catalog().get("h100-sxm").peak_flops("bf16")


@pytest.mark.parametrize(("precision", "pure"), [
    ("bf16 (pure bf16: model loaded in bf16, HF Trainer bf16=True; weights, grads and AdamW states all bf16, no fp32 "
     "master copy)", True),
    ("pure bf16 (model loaded in torch.bfloat16, amp_training False)", True),
    ("bf16 without an fp32 master copy", True),
    ("bf16 (DeepSpeed bf16: bf16 params/grads, fp32 master weights and fp32 AdamW states)", False),
    ("bf16 mixed precision", False),
])
def test_pure_bf16_said_in_words_halves_the_states(precision: str, pure: bool) -> None:
    """Round 12: full fine-tunes of a model loaded in bf16 (no fp32 master, bf16 AdamW states) were predicted at the
    mixed-precision 16 B/param: Qwen-7B on one A100 at 128.7 GiB against 73.6 measured."""
    from stride.perfmodel.memory_model import _states

    row = _llama8b_row(precision=precision, num_gpus="1", dp="1", cp="1", zero_or_fsdp="none",
                       framework="Hugging Face Trainer")
    lay = row_inputs(row, load_catalog()).layout
    assert lay.pure_bf16 is pure
    total = sum(_states(lay, 1_000_000, 4).values()) / 1e6  # 4-byte (fp32) main gradients where mixed
    assert total == 8.0 if pure else total >= 16.0  # 2 + 2 + 4 bytes a parameter, or a master copy and fp32 Adam
