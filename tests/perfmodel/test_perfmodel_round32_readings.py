"""What blind round 32 found (docs/perfmodel.md, "Round 32"): attention written op by op in uncompiled PyTorch, the
expert-parallel degree said in the framework cell, and a NeMo config that checkpoints no block."""

from __future__ import annotations

import pytest
from test_perfmodel_row_variants import BASE  # the same base row; pytest puts this folder on sys.path

from stride.perfmodel import row_text as rt
from stride.perfmodel.block_time import block_time, eager_score_bytes
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.frameworks import compiled
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.kernels import Costs
from stride.perfmodel.published import row_inputs

CAT = load_catalog()
GPT2 = {**BASE, "model": "GPT-2 124M", "arch": "GPT-2: LayerNorm, GeLU MLP 4h, learned positions, tied, no dropout",
        "layers": "12", "hidden": "768", "heads": "12", "kv_heads": "12", "ffn_hidden": "3072", "ffn_act": "gelu",
        "vocab": "50304", "seq_len": "1024", "global_batch_seqs": "16", "micro_batch": "16", "gpu": "A100 SXM4 80GB",
        "num_gpus": "1", "gpus_per_node": "1", "zero_or_fsdp": "", "recompute": "none"}


@pytest.mark.parametrize(("framework", "attention"), [
    ("PyTorch eager, manual causal attention (masked softmax)", "materialized"),
    ("PyTorch, naive attention", "materialized"),
    ("HF transformers 4.46, attn_implementation='eager'", "materialized"),
    ("PyTorch, SDPA math backend", "materialized"),
    ("PyTorch eager, F.scaled_dot_product_attention (flash backend)", "flash"),
    ("PyTorch eager", "flash"),  # nothing said: a fused kernel, as every row dated after 2022
])
def test_attention_written_op_by_op_is_read_as_materialised(framework: str, attention: str) -> None:
    assert row_inputs({**GPT2, "framework": framework}, CAT).layout.attention == attention


def test_eager_score_bytes_count_every_kernel_of_the_chain() -> None:
    # 16-bit autocast: scale 4 + mask 4 + cast 6 + fp32 softmax 8 + cast 6; backward 6 + 12 + 6 + 4 + 4
    assert eager_score_bytes(False, 0) == (28, 32)
    assert eager_score_bytes(False, 1) == (33, 37)  # dropout: read 2, write 2, a 1-byte mask, each way
    assert eager_score_bytes(True, 0) == (24, 28)  # fp32: no casts, 4-byte passes
    assert eager_score_bytes(True, 1) == (33, 37)


def _elementwise_seconds(framework: str, precision: str = "bf16") -> tuple[float, Costs]:
    inp = row_inputs({**GPT2, "framework": framework, "precision": precision}, CAT)
    lay, spec, hw = inp.layout, inp.spec, inp.hardware
    c = Costs(hw, Efficiency(), lay, spec)
    bt = block_time(spec, lay, hw, Efficiency(), c, 16 * 1024)
    return bt.terms["elementwise"], c


def test_an_uncompiled_manual_attention_pays_the_chain_and_a_compiled_one_the_fused_kernel() -> None:
    eager, c = _elementwise_seconds("PyTorch eager, manual causal attention")
    fused, _ = _elementwise_seconds("PyTorch, torch.compile on, manual causal attention")
    assert not c.fused
    # the score traffic alone, by hand: 16 x 1024 tokens x 12 heads x 1024 scores a token, 60 B vs 10 B a score
    scores = 16 * 1024 * 12 * 1024
    per_byte = 1 / c.mem_bw
    # the difference is the score traffic's (the rest of the elementwise work is costed alike but for the compiled
    # model's fused norms and activation, which lowers `fused` further)
    assert eager - fused >= scores * (60 - 10) * per_byte * 0.999


def test_neuron_and_pytorch_xla_runs_are_compiled_graphs() -> None:
    assert compiled("NeuronX Distributed (neuronx-distributed, Neuron SDK 2.18.0, torch-neuronx 2.1.2)")
    assert compiled("PyTorch/XLA 2.4 on TPU v5p")
    assert compiled("torch_xla FSDPv2")
    assert not compiled("PyTorch DDP, eager")


@pytest.mark.parametrize(("text", "ep"), [
    ("torchtitan, --parallelism.expert_parallel_degree=8", 8.0),
    ("expert_parallel_degree 4 (EP 4)", 4.0),
    ("Megatron-Bridge on Megatron-Core; expert parallel 16 across 2 nodes, ETP 1", 16.0),
    ("--expert-model-parallel-size 32", 32.0),
    ("DeepEP commit bfded348", None),  # DeepEP is a library, not a degree
])
def test_expert_parallel_degree_words(text: str, ep: float | None) -> None:
    assert rt.moe(text).get("ep") == ep


MOE = {**BASE, "model": "Qwen3-30B-A3B", "arch": "48 layers, all MoE: 128 routed experts top-8, expert ffn 768; GQA",
       "layers": "48", "hidden": "2048", "heads": "32", "kv_heads": "4", "ffn_hidden": "6144", "vocab": "151936",
       "seq_len": "4096", "num_gpus": "16", "global_batch_seqs": "1024", "framework": "Megatron-Core",
       "zero_or_fsdp": "distributed optimizer"}


def test_ep_in_the_framework_cell_is_read_where_the_model_cells_are_silent() -> None:
    said = row_inputs({**MOE, "framework": "Megatron-Core, expert parallel 16 across 2 nodes"}, CAT)
    assert said.layout.ep == 16
    assert row_inputs(MOE, CAT).layout.ep == 1  # said nowhere: experts replicated, as before
    # the model's own cells win where both say it
    both = row_inputs({**MOE, "notes": "EP 8", "framework": "Megatron-Core, expert parallel 16"}, CAT)
    assert both.layout.ep == 8


@pytest.mark.parametrize(("text", "mode"), [
    ("activations_checkpoint_granularity: full, method: block, num_layers: 0 (no layer recomputed)", "none"),
    ("full; no layers recomputed", "none"),
    ("full (recompute_num_layers 1)", "full"),
    ("full, uniform, recompute_num_layers 0.5", "full"),
    ("full (recompute_num_layers 1); cpu_offloading_num_layers=0", "full"),  # no offload, not no recompute
])
def test_a_block_count_of_zero_checkpoints_nothing(text: str, mode: str) -> None:
    assert rt.recompute(text) == mode


def test_the_nemo_5b_row_runs_without_recompute() -> None:
    row = {**BASE, "recompute": "activations_checkpoint_granularity: full, method: block, num_layers: 0"}
    assert row_inputs(row, CAT).layout.recompute == "none"


def test_a_dense_row_that_says_no_experts_is_not_read_as_moe() -> None:
    row = {**BASE, "model": "Llama 3 70B", "layers": "80", "hidden": "8192", "heads": "64", "ffn_hidden": "28672",
           "notes": "dense FP8 run (no experts)"}
    got = row_inputs(row, CAT)
    assert got.reason is None and not got.spec.moe
    assert "experts" in (row_inputs({**row, "notes": "a MoE run"}, CAT).reason or "")  # said MoE, counts missing
