"""What the round-9 blind test found the model misreading (docs/perfmodel.md, "Blind test (round 9)"): each
reading is checked on the text as the sources wrote it."""

from __future__ import annotations

import pytest

from stride.perfmodel import row_text as rt
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.precision import recipe_from_text
from stride.perfmodel.published import row_inputs


def _llama7b_row(**over: str) -> dict:
    row = {"row_id": "t", "model": "Llama 2 7B", "arch": "llama", "params_b": "6.74", "layers": "32",
           "hidden": "4096", "heads": "32", "kv_heads": "32", "ffn_hidden": "11008", "ffn_act": "swiglu",
           "vocab": "32000", "seq_len": "4096", "global_batch_seqs": "256", "micro_batch": "4",
           "gpu": "H100 SXM 80GB", "num_gpus": "8", "gpus_per_node": "8", "tp": "1", "pp": "1", "dp": "8",
           "cp": "1", "zero_or_fsdp": "distributed optimizer", "recompute": "none", "precision": "bf16",
           "framework": "Megatron-LM"}
    return {**row, **over}


@pytest.mark.parametrize(("text", "expect"), [
    # a format said to be off is not run (Primus' argument dump: "fp8 None")
    ("bf16 (fp8 None)", (None, "")),
    ("bf16, fp8=false", (None, "")),
    ("bf16; no FP8", (None, "")),
    ("bf16 without float8", (None, "")),
    ("fp8: 0", (None, "")),
    # Transformer Engine runs bf16 GEMMs too: it is not a precision
    ("bf16 (Transformer Engine)", (None, "")),
    ("bf16 via TE", (None, "")),
    # what was already read stays read
    ("FP8 hybrid (TE, fp8-interval 1, amax-history-len 1024)", ("fp8", "delayed")),
    ("fp8_hybrid True", ("fp8", "delayed")),
    ("fp8 0.5 margin", ("fp8", "delayed")),
    ("fp4=true fp4_recipe=nvfp4 (fp8=false; nvte_nvfp4_disable_rht=1)", ("fp4", "nvfp4")),
    ("nvfp4 disabled, fp8 current scaling", ("fp8", "current")),
    ("MXFP8", ("fp8", "mxfp8")),
])
def test_low_precision_said_off(text: str, expect: tuple) -> None:
    assert recipe_from_text(text.lower()) == expect


def test_a_bf16_row_whose_config_names_fp8_none_runs_bf16() -> None:
    lay = row_inputs(_llama7b_row(precision="bf16 (fp8 None)"), load_catalog()).layout
    assert lay.precision == "bf16"


@pytest.mark.parametrize(("text", "mode"), [
    # two mechanisms, one on and one off: the one that is on (Hugging Face's checkpointing under FSDP)
    ("HF gradient checkpointing (--gradient_checkpointing); fsdp_activation_checkpointing false", "full"),
    ("activation checkpointing: full; cpu offload no", "full"),
    # a config's granularity key decides alone: the method and layer count are unused without it
    ("recompute_granularity None; recompute_method uniform; recompute_num_layers 1", "none"),
    ("none (activations_checkpoint_granularity: null, launcher yaml)", "none"),
    ("selective (preset recompute_modules layernorm, moe_act)", "selective"),
    ("no recompute; HFU = MFU", "none"),
    ("full, block, 5 layers", "full"),
])
def test_recompute_clauses(text: str, mode: str) -> None:
    assert rt.recompute(text) == mode


@pytest.mark.parametrize(("framework", "attention"), [
    ("Megatron-LM for ROCm, flash attention not installed (USE_FLASH_ATTN=0)", "materialized"),
    ("Megatron-LM, use_flash_attn=0", "materialized"),
    ("Megatron-LM, flash attention: disabled", "materialized"),
    ("Megatron-LM, without flash attention", "materialized"),
    ("Megatron-LM, use_flash_attn True", "flash"),
    ("Megatron-LM, FlashAttention, no compile", "flash"),
    ("Megatron-LM, flash attention (not stated which version)", "flash"),
])
def test_flash_attention_said_off(framework: str, attention: str) -> None:
    lay = row_inputs(_llama7b_row(framework=framework), load_catalog()).layout
    assert lay.attention == attention


@pytest.mark.parametrize(("framework", "attention"), [
    ("axlearn SpmdTrainer (JAX/XLA GPU), XLA dot-product attention, AdamW", "materialized"),
    ("MaxText, jax.nn.dot_product_attention(implementation='xla')", "materialized"),
    ("MaxText, attention=cudnn_flash_te", "flash"),
])
def test_xla_attention_is_materialized(framework: str, attention: str) -> None:
    assert row_inputs(_llama7b_row(framework=framework), load_catalog()).layout.attention == attention


@pytest.mark.parametrize(("text", "offloaded"), [
    ("ZeRO-3 (DeepSpeed ZeRO stage 3); offload: not stated for this run", False),
    ("ZeRO-3, offload (not stated)", False),
    ("ZeRO-3, offload_optimizer device cpu", True),
])
def test_offload_not_stated_is_no_offload(text: str, offloaded: bool) -> None:
    assert rt.offloads(text) is offloaded


# ---- round 10 (technical reports): readings fixed after its blind run -------------------------------------------


@pytest.mark.parametrize(("text", "gbs"), [
    ("8 NVIDIA Mellanox 400 Gbps HDR InfiniBand HCAs per node (as the report writes it)", 50.0),  # a count, no "x"
    ("8x HDR InfiniBand 200 Gb/s per node", 25.0),
    ("2 nodes with 400 Gb/s NICs", 50.0),  # a count of nodes is not a count of adapters
    ("4 nodes, 200 Gb/s HDR per node", 25.0 / 8),
])
def test_adapter_count_without_x(text: str, gbs: float) -> None:
    from stride.perfmodel.hw_text import link_gbytes_per_device
    assert link_gbytes_per_device(text, 8) == pytest.approx(gbs)


def test_flash_named_for_the_run_outranks_a_baseline_named_in_the_notes() -> None:
    row = _llama7b_row(framework="flash-attention training scripts; attention FlashAttention-2",
                       notes="Baseline column 'Without FlashAttention' (80 TFLOPs/s) not transcribed")
    assert row_inputs(row, load_catalog()).layout.attention == "flash"
    # where the run's own columns say nothing, the doubts still fill in (an inferred materialised attention)
    row = _llama7b_row(framework="Megatron-DeepSpeed", uncertain_fields="attention (no flash flag: materialized)")
    assert row_inputs(row, load_catalog()).layout.attention == "materialized"


def test_zero_without_its_stage_is_stage_one_and_said() -> None:
    stage, notes = rt.zero_stage("ZeRO (per-GPU memory under ZeRO distribution; stage not stated)")
    assert stage == 1 and "stage 1" in notes[0]
    ri = row_inputs(_llama7b_row(zero_or_fsdp="ZeRO (stage not stated)"), load_catalog())
    assert ri.layout.zero == 1 and any("ZeRO without its stage" in n for n in ri.notes)


def test_precision_text_naming_no_format_is_as_if_blank() -> None:
    assert rt.precision("Skywork-Megatron (built on Megatron-LM 23.06 branch)")[0] == "bf16"
    with pytest.raises(ValueError, match="not understood"):
        rt.precision("int8 training")


def test_blank_global_batch_under_a_pipeline_is_refused() -> None:
    ri = row_inputs(_llama7b_row(global_batch_seqs="", tp="1", pp="2", dp="4"), load_catalog())
    assert ri.reason and "bubble" in ri.reason
    ri = row_inputs(_llama7b_row(global_batch_seqs=""), load_catalog())  # no pipeline: micro x dp, noted
    assert ri.reason is None and ri.global_batch == 4 * 8
