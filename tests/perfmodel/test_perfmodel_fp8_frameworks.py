"""Low precision and framework profiles against hand-computed cases: cast traffic per recipe, which
GEMMs run at the FP8 peak, FP8 weight all-gather, gradient-reduction bytes and overlap per
framework, optimizer-state memory per framework."""

from __future__ import annotations

import dataclasses

import pytest

from stride.perfmodel import collectives as coll
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.flops import Gemm, total_params
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.kernels import Costs
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import TransformerSpec

H100 = load_catalog().get("h100-sxm")
EFF = Efficiency()
SPEC = TransformerSpec(8, 1024, 8, 8, 4096, "gelu", 32000, 2048, name="small")
G = Gemm("mlp_in", 1024, 4096, 2048)  # (1024 x 2048) @ (2048 x 4096)
BW = H100.memory_bw * EFF.memory


@pytest.mark.parametrize(("recipe", "per_elem"), [
    ("delayed", 2 + 2), ("current", 4 + 2), ("tensorwise", 4 + 2), ("rowwise", 4 + 2),
    ("mxfp8", 2 + 2 + 2 / 32), ("nvfp4", 2 + 1 + 2 / 16 + 4),
])
def test_cast_traffic_per_recipe(recipe: str, per_elem: float) -> None:
    """Forward casts the input (m x k) and the weight (k x n) unless cached; backward the output
    gradient (m x n); bytes per element = read + write (+ amax pass, + Hadamard pass)."""
    prec, hw = ("fp4", load_catalog().get("b200")) if recipe == "nvfp4" else ("fp8", H100)
    bw = hw.memory_bw * EFF.memory
    c = Costs(hw, EFF, Layout(precision=prec, fp8_recipe=recipe), SPEC)
    fwd, bwd = c.casts(G, weights_cached=False)
    assert fwd == pytest.approx(per_elem * (1024 * 2048 + 2048 * 4096) / bw, rel=1e-12)
    assert bwd == pytest.approx(per_elem * 1024 * 4096 / bw, rel=1e-12)
    cached, _ = c.casts(G, weights_cached=True)
    assert cached == pytest.approx(per_elem * 1024 * 2048 / bw, rel=1e-12)


def test_nvfp4_needs_a_part_with_an_fp4_peak() -> None:
    with pytest.raises(Exception, match="no fp4 peak"):
        Costs(H100, EFF, Layout(precision="fp4", fp8_recipe="nvfp4"), SPEC)


def test_fp8_gemms_use_the_fp8_peak_and_the_rest_stays_16_bit() -> None:
    c = Costs(H100, EFF, Layout(precision="fp8", fp8_recipe="delayed"), SPEC)
    # each dtype at its own published best GEMM (MAMF: 1402.6 of 1978.9 fp8, 794.5 of 989.4 bf16) x gemm
    want = G.flops / (1402.6e12 * EFF.gemm) + (1 * (1024 * 2048 + 2048 * 4096) + 2 * 1024 * 4096) / BW
    assert c.gemm(G) == pytest.approx(want, rel=1e-12)
    logits = Gemm("logits", 1024, 32000, 1024)
    want16 = logits.flops / (794.5e12 * EFF.gemm) + (2 * (1024 * 1024 + 1024 * 32000) + 2 * 1024 * 32000) / BW
    assert c.gemm(logits) == pytest.approx(want16, rel=1e-12)  # the LM head stays bf16 ...
    head = Costs(H100, EFF, Layout(precision="fp8", fp8_head=True), SPEC)
    assert head.gemm(logits) < c.gemm(logits)  # ... unless the row says it is FP8
    core = Gemm("attn_scores", 2048, 2048, 128, 8)
    assert c.gemm(core) == pytest.approx(Costs(H100, EFF, Layout(), SPEC).gemm(core), rel=1e-12)


def test_rowwise_with_high_precision_weight_gradient() -> None:
    gw = Costs(H100, EFF, Layout(precision="fp8", fp8_recipe="rowwise_gw_hp"), SPEC)
    assert gw.backward_gemms(G) == pytest.approx(gw.gemm(G, True) + gw.gemm(G, False), rel=1e-12)
    full = Costs(H100, EFF, Layout(precision="fp8", fp8_recipe="rowwise"), SPEC)
    assert full.backward_gemms(G) == pytest.approx(2 * full.gemm(G, True), rel=1e-12)


def test_fsdp_fp8_weight_all_gather_halves_the_gather_bytes() -> None:
    lay = Layout(dp=8, zero=3, framework="fsdp2", precision="fp8", fp8_recipe="tensorwise", micro_batch=1)
    bf = predict(SPEC, lay, H100, 16)
    f8 = predict(SPEC, dataclasses.replace(lay, fp8_gather=True), H100, 16)
    params = total_params(SPEC)
    m = 2  # 16 sequences / dp 8 / micro-batch 1
    # per micro-batch: gather forward + gather backward at 2 -> 1 B per weight, over (dp-1)/dp of it
    saved = (8 - 1) / 8 * params * 2 * (2 - 1) * m
    assert bf.comm_bytes_per_device["scale-up"] - f8.comm_bytes_per_device["scale-up"] == pytest.approx(saved, rel=1e-9)


def test_gradient_reduction_dtype_per_framework() -> None:
    """Megatron reduces bf16 gradients in fp32 (4 B on the wire); PyTorch DDP in their own dtype (2 B)."""
    params = total_params(SPEC)
    for fw, gbytes in (("megatron", 4), ("ddp", 2)):
        p = predict(SPEC, Layout(dp=8, framework=fw), H100, 8)
        assert p.comm_bytes_per_device["scale-up"] == pytest.approx(2 * 7 / 8 * params * gbytes, rel=1e-9), fw


def test_overlap_per_framework_profile() -> None:
    """DeepSpeed ZeRO-1/2 reduce after backward (overlap_comm defaults to False below stage 3):
    the whole reduce-scatter + all-gather is exposed; Megatron-Core overlaps them."""
    hw = dataclasses.replace(H100, scaleup_domain=1)  # dp over the network, so communication matters
    lay = Layout(dp=16, zero=1, framework="deepspeed")
    ds = predict(SPEC, lay, hw, 16)
    params, link = total_params(SPEC), coll.group_link(hw, 16, 1, EFF.network)
    want = coll.reduce_scatter_time(params * 4, 16, link) + coll.all_gather_time(params * 2, 16, link)
    assert ds.breakdown_s["dp_comm"] == pytest.approx(want, rel=1e-9)
    mg = predict(SPEC, dataclasses.replace(lay, framework="megatron"), hw, 16)
    assert mg.breakdown_s["dp_comm"] < want  # part of it hidden under the last backward
    legacy = predict(SPEC, Layout(dp=16, framework="megatron-legacy"), hw, 16)
    assert legacy.breakdown_s["dp_comm"] == pytest.approx(coll.all_reduce_time(params * 4, 16, link), rel=1e-9)


@pytest.mark.parametrize(("framework", "zero", "per_param"), [
    ("torchtune", 0, 2 + 2 + 4),  # bf16 weights, gradients, AdamW m and v
    ("megatron", 0, 2 + 4 + 12),  # bf16 weights, fp32 main grads, fp32 master + m + v
    ("megatron", 1, 2 + 4 + 12 / 8),  # distributed optimizer over dp 8
    ("fsdp2", 3, 16 / 8),  # fp32 sharded parameters (the master), gradients, m, v
    ("fsdp1", 2, 16 / 8 + 2),  # SHARD_GRAD_OP keeps the bf16 unsharded weights after forward
    ("maxtext", 3, 16 / 8),
    ("ddp", 0, 16 + 4),  # fp32 weights, gradients, m, v + the bucket copies
    ("deepspeed", 2, 2 + 4 / 8 + 12 / 8),
])
def test_model_state_bytes_per_framework(framework: str, zero: int, per_param: float) -> None:
    p = predict(SPEC, Layout(dp=8, zero=zero, framework=framework), H100, 8)
    states = sum(p.memory_bytes[k] for k in ("params", "grads", "optimizer"))
    assert states == pytest.approx(per_param * total_params(SPEC), rel=1e-9)


def test_xla_fusion_leaves_only_the_norms_memory_bound() -> None:
    xla = Costs(load_catalog().get("tpu-v5p"), EFF, Layout(framework="maxtext"), SPEC)
    assert xla.elementwise_per_token(1) == (8 * 1024, 0.0)
    eager = Costs(H100, EFF, Layout(framework="fsdp2"), SPEC)
    fused = Costs(H100, EFF, Layout(framework="fsdp2", compile=True), SPEC)
    assert sum(eager.elementwise_per_token(1)) > sum(fused.elementwise_per_token(1)) == 20 * 1024 + 4 * 4096


def test_fp8_saves_linear_inputs_in_one_byte() -> None:
    lay = Layout(dp=1, precision="bf16")
    bf = predict(SPEC, lay, H100, 4).memory_bytes["activations"]
    f8 = predict(SPEC, dataclasses.replace(lay, precision="fp8"), H100, 4).memory_bytes["activations"]
    tokens = 2048
    assert bf - f8 == pytest.approx(SPEC.layers * tokens * (2 * 1024 + 1024 + 4096), rel=1e-9)


def test_eager_blocks_save_more_than_fused_ones_by_their_features() -> None:
    """A llama block in eager PyTorch keeps two RMSNorm outputs, rotated q and k, the attention
    output copy and the silu output beyond the fused count; a GPT block (LayerNorm, learned
    positions, gelu) only the attention output copy (16-bit values per token)."""
    from stride.perfmodel.memory_model import eager_saved_per_token

    llama = TransformerSpec(2, 4096, 32, 8, 14336, "swiglu", 32000, 4096)
    assert eager_saved_per_token(llama, llama.ffn) == 2 * 4096 + (4096 + 1024) + 4096 + 14336
    gpt = TransformerSpec(2, 2048, 16, 16, 8192, "gelu", 50000, 2048, learned_pos=True, bias=True)
    assert eager_saved_per_token(gpt, gpt.ffn) == 2048
    fused = predict(llama, Layout(framework="megatron"), H100, 1).memory_bytes["activations"]
    eager = predict(llama, Layout(framework="fsdp2"), H100, 1).memory_bytes["activations"]
    assert eager - fused == pytest.approx(2 * 4096 * 2 * eager_saved_per_token(llama, llama.ffn), rel=1e-9)
