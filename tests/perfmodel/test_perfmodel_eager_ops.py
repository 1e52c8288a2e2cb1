"""Eager model code: an uncompiled RMSNorm or rotary embedding written as PyTorch ops (Hugging Face transformers,
torchtitan, torchtune, litgpt, fms) costs a chain of elementwise passes, not one kernel. Which rows are read so, from
the words frameworks and papers use, and what it costs, by hand from the byte counts in kernels.py."""

from __future__ import annotations

import dataclasses

import pytest
from test_perfmodel_row_variants import BASE  # the same base row; pytest puts this folder on sys.path

from stride.perfmodel import row_text as rt
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.frameworks import compiled, fused_loss
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.kernels import EAGER_MOE_ROUTING_EXTRA, EAGER_RMSNORM_EXTRA, EAGER_ROPE_EXTRA, Costs
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import PRESETS, TransformerSpec
from stride.perfmodel.published import row_inputs

CAT = load_catalog()


def _lay(framework: str, text: str, **row: str) -> Layout:
    return row_inputs({**BASE, "framework": text, **row}, CAT).layout


@pytest.mark.parametrize("framework_text, norm, rope", [
    ("torchtitan (commit 9dec370), torch.compile: no", True, True),
    ("torchtitan (commit 9dec370), torch.compile: yes (per TransformerBlock)", False, False),  # Inductor fuses both
    ("torchtitan (commit 1ea476e, April 2024), torch.compile: no, norm_type fused_rmsnorm", False, True),
    ("torchtitan (HEAD 2025-05-20) with torch 2.8.0a0+gite21ad6e", True, True),  # nn.RMSNorm still a chain
    ("torchtitan (commit d66b72a6, Sept 2025; experiments/qwen3)", False, True),  # nn.RMSNorm's fused kernel
    ("torchtitan, pytorch 2.9.0.dev20250815", False, True),
    ("PyTorch FSDP via HF Accelerate, transformers 4.40", True, True),
    ("HF Trainer with Liger-Kernel, DDP", False, False),  # Liger patches the norm, RoPE, SwiGLU and loss
    ("HF Trainer, PyTorch FSDP1; Liger-Kernel OFF (stock HF modeling code)", True, True),  # the baseline of a pair
    ("HF Trainer, DDP, use_liger_kernel=False", True, True),
    ("HF Trainer, DDP, without Liger", True, True),
    ("PyTorch FSDP (fms-fsdp), SDPA FlashAttention v2", True, True),
    ("torchtune full_finetune_single_device (PyTorch eager)", True, True),
    ("lit-gpt / Lightning Fabric FSDP; flash attention 2, fused layernorm, fused rotary embedding", False, False),
    ("Megatron-Core (NeMo 24.05)", False, False),  # fused kernels of its own
    ("PyTorch FSDP1 + NVIDIA Transformer Engine", False, False),
    ("Modalities (PyTorch FSDP)", False, False),  # model code not named: one kernel each, as before
    ("XTuner on HF transformers, PyTorch FSDP", False, False),  # dispatches HF's RMSNorm to its Triton kernel
])
def test_which_rows_run_eager_norms_and_rope(framework_text: str, norm: bool, rope: bool) -> None:
    lay = _lay("", framework_text)
    assert (lay.eager_norm, lay.eager_rope) == (norm, rope)


def test_layernorm_models_keep_their_one_kernel() -> None:
    """GPT-2-style models under HF: LayerNorm is one ATen kernel even in eager mode; learned positions, no RoPE."""
    lay = _lay("", "HF transformers Trainer, DDP", arch="GPT-2 (LayerNorm, GELU, learned positions)",
               ffn_act="gelu")
    assert not lay.eager_norm
    assert not rt.rmsnorm("Llama-style but LayerNorm", True)
    assert rt.rmsnorm("Qwen (v1): RMSNorm, rotary, qkv bias", False)
    assert rt.rmsnorm("", True) and not rt.rmsnorm("", False)


@pytest.mark.parametrize("text, want", [
    ("torch 2.8.0a0", False), ("PyTorch 2.9.0", True), ("torch==2.10.0", True), ("2025-07-30", False),
    ("2025-08-02", True), ("Nov 2025", True), ("main of 2024-05-20", False), ("2025", False), ("", False),
    ("torch 2.7 (run 2025-11-01)", False),  # a version said beats a date
])
def test_torch_fused_rmsnorm_by_version_or_month(text: str, want: bool) -> None:
    assert rt.torch_rmsnorm_fused(text) is want


def test_the_chains_cost_their_bytes_by_hand() -> None:
    """Per token and block: two norms' 32 B more per element each over the replicated part, 14 B more per q/k
    element of the rotary embedding over the TP-sharded part; nothing at all when compiled."""
    hw, spec, eff = CAT.get("h100-sxm"), PRESETS["llama3-8b"].with_seq(8192), Efficiency()
    base = Layout(dp=8, zero=3, micro_batch=1, framework="fsdp2", precision="bf16")
    eager = dataclasses.replace(base, eager_norm=True, eager_rope=True)
    r0, t0 = Costs(hw, eff, base, spec).elementwise_per_token(1)
    r1, t1 = Costs(hw, eff, eager, spec).elementwise_per_token(1)
    assert r1 - r0 == pytest.approx(2 * EAGER_RMSNORM_EXTRA * spec.hidden)
    assert t1 - t0 == pytest.approx(EAGER_ROPE_EXTRA * (spec.q_dim + spec.kv_dim))
    compiled = dataclasses.replace(eager, compile=True)
    assert Costs(hw, eff, compiled, spec).elementwise_per_token(1) == \
        Costs(hw, eff, dataclasses.replace(base, compile=True), spec).elementwise_per_token(1)
    # the step: only the elementwise term moves, by (3 + recompute share) x the forward bytes at the HBM rate
    p0, p1 = predict(spec, base, hw, 8, eff), predict(spec, eager, hw, 8, eff)
    moved = {k for k in p0.breakdown_s if abs(p1.breakdown_s[k] - p0.breakdown_s[k]) > 1e-12}
    assert moved == {"elementwise"}
    fwd_bytes = 8192 * ((r1 - r0) + (t1 - t0)) * spec.layers
    assert p1.breakdown_s["elementwise"] - p0.breakdown_s["elementwise"] == pytest.approx(
        3 * fwd_bytes / (hw.memory_bw * eff.memory), rel=1e-6)


def test_torch_compile_gains_what_torchtitan_measured_closer() -> None:
    """torchtitan's paper (Table 1, 9dec370, 8 H100): torch.compile raised Llama 3.1 8B from 5,762 to 6,667 tokens/s
    a GPU (1.157x). Costing the eager norms and RoPE, the modelled gain is most of it (it was 1.04x)."""
    eager = row_inputs({**BASE, "framework": "torchtitan (commit 9dec370), torch.compile: no",
                        "micro_batch": "2", "num_gpus": "8", "global_batch_seqs": "16",
                        "recompute": "selective op"}, CAT)
    comp = row_inputs({**BASE, "framework": "torchtitan (commit 9dec370), torch.compile: yes",
                       "micro_batch": "2", "num_gpus": "8", "global_batch_seqs": "16",
                       "recompute": "selective op"}, CAT)
    eff = Efficiency()
    te = predict(eager.spec, eager.layout, eager.hardware, eager.global_batch, eff).step_time_s
    tc = predict(comp.spec, comp.layout, comp.hardware, comp.global_batch, eff).step_time_s
    assert 1.10 < te / tc < 1.20


@pytest.mark.parametrize("text, model, loss", [
    ("torchtitan @f738a03bf, torch.compile: loss only (toml components ['loss'])", False, True),
    ("torchtitan (main, early Oct 2025); torch.compile on loss only (compile.components=['loss'])", False, True),
    ("torchtitan, compile.components = ['model', 'loss']", True, True),
    ("torchtitan, torch.compile: yes", True, False),
])
def test_a_compiled_loss_alone_leaves_the_model_eager(text: str, model: bool, loss: bool) -> None:
    """torchtitan's `compile.components = ['loss']` compiles the loss, not the blocks (round 23's and 30's
    DeepSeek-V3 16B rows were read as compiled models)."""
    assert (compiled(text), fused_loss(text)) == (model, loss)


@pytest.mark.parametrize("text, fused", [
    # graph_trainer's aot_fx_trace: Inductor compiles only tagged regions (FlexAttention) unless told `full`
    ("torchtitan graph_trainer (2026-06), compile.mode aot_fx_trace, inductor_compilation regional (default)", False),
    ("torchtitan graph_trainer @27aa49077, compile: graph_trainer aot_fx_trace (default pass pipeline)", False),
    ("torchtitan experiments/graph_trainer: aot_fx_trace full-graph capture with regional Inductor compilation", False),
    ("torchtitan experiments/graph_trainer (Mar 2026): full fwd+bwd graph capture (aot_fx_trace) and compile", False),
    ("torchtitan graph_trainer (2026-06), aot_fx_trace, full Inductor compilation, CUDA graph captured", True),
    ("torchtitan graph_trainer, compile.mode aot_fx_trace, inductor_compilation full", True),
    # the aot_eager backend traces and runs the ops one by one (no Inductor code generation)
    ("SimpleFSDP (compiler-based FSDP) with torch.compile backend 'aot_eager' (no Inductor codegen)", False),
    # torch.compile of each block through Inductor stays compiled, whatever it is called
    ("HF accelerate FSDP2 plugin + TorchDynamoPlugin(inductor, regional compilation of decoder layers)", True),
    ("torchtitan (FSDP2), torch.compile: yes (per-TransformerBlock regional compile)", True),
])
def test_a_graph_run_op_by_op_is_not_compiled(text: str, fused: bool) -> None:
    """A captured graph whose ops run one by one fuses nothing (round 33's graph_trainer DeepSeek-V3 rows read as
    compiled: +117..+842 %)."""
    assert compiled(text) is fused
    lay = _lay("fsdp2", text)
    assert lay.compile is fused


def test_eager_moe_routing_costs_its_chain_by_hand() -> None:
    """torchtitan's uncompiled MoE layer: gather, fp32 score multiply, alignment permute/unpermute and scatter_add move
    34 B more per routed element (top_k x hidden) than the one fused permute/unpermute counted; compiled, nothing."""
    hw, eff = CAT.get("h100-sxm"), Efficiency()
    spec = TransformerSpec(layers=27, hidden=2048, heads=16, kv_heads=16, ffn=10944, act="swiglu", vocab=102400,
                           seq=4096, experts=64, top_k=6, moe_ffn=1408)
    base = Layout(dp=8, ep=8, zero=3, micro_batch=8, framework="fsdp2", precision="bf16")
    eager = dataclasses.replace(base, eager_norm=True, eager_rope=True)
    r0, t0 = Costs(hw, eff, base, spec).elementwise_per_token(1)
    r1, t1 = Costs(hw, eff, eager, spec).elementwise_per_token(1)
    assert t1 - t0 == pytest.approx(EAGER_ROPE_EXTRA * (spec.q_dim + spec.kv_dim)
                                    + EAGER_MOE_ROUTING_EXTRA * spec.top_k * spec.hidden)
    dense = dataclasses.replace(spec, experts=0, top_k=1, moe_ffn=0)
    d0, d1 = (Costs(hw, eff, lay, dense).elementwise_per_token(1)[1] for lay in (base, eager))
    assert d1 - d0 == pytest.approx(EAGER_ROPE_EXTRA * (dense.q_dim + dense.kv_dim))  # no routing without experts
