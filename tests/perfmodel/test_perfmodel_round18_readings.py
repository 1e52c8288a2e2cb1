"""What the round-18 blind test found (docs/perfmodel.md, "Round 18"): a negated "materialized" is not materialised
attention, and a kernel named in the source's title is the paper's own, not its baseline's."""

from __future__ import annotations

import pytest

from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.published import row_inputs

# DISTFLASHATTN's Megatron-LM baseline (arXiv:2310.03294, Table 1), as the blind transcription wrote it
ROW = {
    "row_id": "distflashattn-megatron", "source": "Li, Shao et al., DISTFLASHATTN: Distributed Memory-efficient "
    "Attention for Long-context LLMs Training, COLM 2024 (arXiv:2310.03294)",
    "arch": "LLaMA: RMSNorm, SwiGLU, RoPE, head_dim=128, flash attention, causal mask not materialized",
    "layers": "32", "hidden": "4096", "heads": "32", "kv_heads": "32", "ffn_hidden": "11008", "ffn_act": "swiglu",
    "vocab": "32000", "seq_len": "65536", "global_batch_seqs": "1", "micro_batch": "1", "gpu": "A100 80GB",
    "num_gpus": "8", "gpus_per_node": "8", "tp": "8", "pp": "1", "dp": "1", "sp": "True", "recompute": "full",
    "precision": "bf16 mixed", "meas_iter_time_s": "6.81",
    "framework": "Megatron-LM with FlashAttention-2 (Triton kernel); a patch so Megatron-LM does not materialize "
                 "the causal attention mask",
}


@pytest.mark.parametrize("words", ["causal mask not materialized", "scores never materialised",
                                   "the mask is non-materialized"])
def test_a_negated_materialized_is_flash_attention(words: str) -> None:
    got = row_inputs({**ROW, "arch": f"LLaMA, flash attention, {words}"}, load_catalog())
    assert got.reason is None and got.layout.attention == "flash"


def test_materialized_scores_still_read_as_materialised() -> None:
    row = {**ROW, "arch": "GPT-2, standard attention (attention matrix materialized)", "framework": "HF GPT-2"}
    assert row_inputs(row, load_catalog()).layout.attention == "materialized"


def test_the_kernel_the_run_names_wins_over_the_source_title() -> None:
    cat = load_catalog()
    assert row_inputs(ROW, cat).layout.attn_kernel == "fa2"  # was xformers ("memory-efficient attention")
    # a source title still names the kernel where the run's own columns name none
    quiet = {**ROW, "framework": "Megatron-LM", "notes": ""}
    assert row_inputs(quiet, cat).layout.attn_kernel == "xformers"
    assert row_inputs({**quiet, "source": "Megatron-LM paper"}, cat).layout.attn_kernel == "auto"
