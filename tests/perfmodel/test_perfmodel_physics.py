"""Per-part physics from published figures, against hand computations: the best achievable GEMM
(MAMF) per part and dtype, the published fused-attention curves (forward and backward, by sequence
length, head dim, kernel and part), NCCL's achievable bus bandwidth per link level, and hybrid
sharding (FSDP inside a group, gradients all-reduced across groups)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from stride.perfmodel import attention_kernels as ak
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.flops import Gemm, layer_gemms, total_params
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.hw_text import resolve
from stride.perfmodel.kernels import Costs
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import TransformerSpec

CAT = load_catalog()
EFF = Efficiency()
SPEC = TransformerSpec(8, 2048, 16, 16, 8192, "gelu", 32000, 2048, name="hd128")


def test_mamf_fractions_per_part_and_dtype() -> None:
    h100, a100 = CAT.get("h100-sxm"), CAT.get("a100-80gb")
    assert h100.matmul_fraction("bf16") == pytest.approx(794.5 / 989.4)
    assert h100.matmul_fraction("fp8") == pytest.approx(1402.6 / 1978.9)
    assert a100.matmul_fraction("bf16") == pytest.approx(271.2 / 312)
    assert a100.matmul_fraction("fp16") == pytest.approx(271.2 / 312)  # no fp16 figure: the bf16 one
    assert a100.matmul_efficiency == pytest.approx(271.2 / 312)  # what traced workloads read
    # the published FP8 speedup of the best GEMM is 1.77x, not the datasheet's 2x
    fp8_over_bf16 = h100.matmul_fraction("fp8") * 1978.9 / (h100.matmul_fraction("bf16") * 989.4)
    assert fp8_over_bf16 == pytest.approx(1.765, abs=1e-3)
    assert CAT.get("tpu-v5p").matmul_fraction("bf16") is None  # no MAMF: the TPU class factor


def test_gemm_runs_at_mamf_times_the_shared_factor() -> None:
    eff = dataclasses.replace(EFF, gemm=0.9, memory=0.8)
    g = Gemm("mlp_in", 8192, 8192, 8192)
    for name in ("a100-80gb", "h100-sxm", "b200"):
        hw = CAT.get(name)
        c = Costs(hw, eff, Layout(), SPEC)
        nbytes = 2 * (8192 * 8192 * 3)
        want = g.flops / (hw.mamf_tflops["bf16"] * 1e12 * 0.9) + nbytes / (hw.memory_bw * 0.8)
        assert c.gemm(g) == pytest.approx(want, rel=1e-12)
    tpu = Costs(CAT.get("tpu-v5p"), eff, Layout(framework="maxtext"), SPEC)
    assert tpu.gemm_eff == eff.gemm_tpu


def test_power_cap_moves_the_mamf_with_the_clock() -> None:
    hw, notes = resolve("H100-SXM5-80GB HBM3 @500W", CAT)
    clock = (500 / 700) ** (1 / 3)
    assert hw.peak_tflops["bf16"] == pytest.approx(989.4 * clock)
    assert hw.mamf_tflops["bf16"] == pytest.approx(794.5 * clock)
    assert hw.matmul_fraction("bf16") == pytest.approx(794.5 / 989.4)
    assert any("power cap" in n for n in notes)


def test_a_users_measured_fraction_replaces_the_published_mamf(tmp_path: Path) -> None:
    f = tmp_path / "hw.toml"
    f.write_text('[hardware.my-h100]\nbase = "h100-sxm"\nmatmul_efficiency = 0.71\n')
    mine = load_catalog(f).get("my-h100")
    assert mine.matmul_fraction("bf16") == 0.71 and mine.matmul_fraction("fp8") == 0.71


@pytest.mark.parametrize(
    ("body", "msg"),
    [
        ('[hardware.x]\nbase = "a100-80gb"\nmamf_tflops = { fp8 = 100 }\n', "mamf_tflops"),  # no fp8 peak
        ('[hardware.x]\nbase = "a100-80gb"\nmamf_tflops = { bf16 = 400 }\n', "mamf_tflops"),  # above the peak
        ('[hardware.x]\nbase = "a100-80gb"\nscaleup_busbw_fraction = 1.2\n', "scaleup_busbw_fraction"),
    ],
)
def test_bad_physics_fields_are_refused(tmp_path: Path, body: str, msg: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(body)
    with pytest.raises(Exception, match=msg):
        load_catalog(f)


def test_attention_curves_as_published() -> None:
    a100, h100 = CAT.get("a100-80gb"), CAT.get("h100-sxm")
    # FA2 on A100 (forward + backward only): both directions at the figure's value
    assert ak.attention_tflops("fa2", a100, 2048, 128) == pytest.approx((155.0, 155.0))
    assert ak.attention_tflops("fa2", a100, 65536, 128) == pytest.approx((189.0, 189.0))  # flat past 16k
    assert ak.attention_tflops("fa2", a100, 256, 64) == pytest.approx((88.0, 88.0))  # flat below 512
    mid = ak.attention_tflops("fa2", a100, int(2048 * math.sqrt(2)), 128)[0]  # halfway in log seq
    assert mid == pytest.approx((155 + 173) / 2, abs=0.01)
    hd96 = ak.attention_tflops("fa2", a100, 2048, 96)[0]  # between head dims 64 and 128, log-linear
    w = math.log(96 / 64) / math.log(2)
    assert hd96 == pytest.approx(140 + w * (155 - 140))
    # FA2 on H100: forward from the FA3 figure, backward from the forward + backward pair
    fwd, bwd = ak.attention_tflops("fa2", h100, 2048, 128)
    assert fwd == pytest.approx(298.0)
    assert 3.5 / (1 / fwd + 2.5 / bwd) == pytest.approx(265.0)  # reproduces the pair's 265
    # FA3 / cuDNN: forward as published, backward at FA2's backward/forward ratio on H100
    f3, b3 = ak.attention_tflops("fa3", h100, 2048, 128)
    assert (f3, b3 / f3) == pytest.approx((521.0, bwd / fwd))
    # the FlashAttention Triton kernel on H100 gains what FA2 gains over A100
    t_a = ak.attention_tflops("triton", a100, 8192, 128)
    t_h = ak.attention_tflops("triton", h100, 8192, 128)
    fa2_a, fa2_h = ak.attention_tflops("fa2", a100, 8192, 128), ak.attention_tflops("fa2", h100, 8192, 128)
    assert t_a == pytest.approx((78.0, 78.0))
    assert t_h[0] == pytest.approx(78.0 * fa2_h[0] / fa2_a[0]) and t_h[1] == pytest.approx(78.0 * fa2_h[1] / fa2_a[1])


def test_attention_on_parts_without_figures() -> None:
    h100, h200, pcie = CAT.get("h100-sxm"), CAT.get("h200"), CAT.get("h100-pcie")
    assert ak.attention_tflops("cudnn", h200, 4096, 128) == ak.attention_tflops("cudnn", h100, 4096, 128)
    scale = 0.803 * 756.5 / 794.5  # the PCIe part's MAMF over the SXM's
    assert ak.attention_tflops("fa2", pcie, 4096, 128)[0] == pytest.approx(319.0 * scale)
    b200 = CAT.get("b200")  # Blackwell: cuDNN on Hopper scaled by MAMF; FA3 does not run there
    assert ak.attention_tflops("fa3", b200, 4096, 128) == pytest.approx(
        tuple(x * 1745.0 / 794.5 for x in ak.attention_tflops("cudnn", h100, 4096, 128))
    )
    assert ak.attention_tflops("fa2", CAT.get("tpu-v5p"), 4096, 128) is None
    assert ak.attention_tflops("fa2", CAT.get("v100"), 4096, 128) is None  # no FA before sm80


def test_flash_core_time_uses_the_runs_kernel_and_the_flash_factor() -> None:
    h100 = CAT.get("h100-sxm")
    flops = 1e15
    for fw, kernel in (("megatron", "cudnn"), ("fsdp2", "fa2"), ("fsdp1", "fa2")):
        c = Costs(h100, EFF, Layout(framework=fw), SPEC)
        assert c.attention_kernel == kernel
        f, b = ak.attention_tflops(kernel, h100, 2048, 128)
        assert c.flash_attention(flops) == pytest.approx((flops / (f * 1e12), 2.5 * flops / (b * 1e12)))
    c = Costs(CAT.get("a100-80gb"), dataclasses.replace(EFF, flash=1.25), Layout(attn_kernel="triton"), SPEC)
    assert c.flash_attention(flops)[0] == pytest.approx(flops / (68e12 * 1.25))
    tpu = Costs(CAT.get("tpu-v5p"), EFF, Layout(framework="maxtext"), SPEC)  # no curve: a fraction of peak
    assert tpu.flash_attention(flops)[0] == pytest.approx(flops / (459e12 * EFF.attention))
    own = dataclasses.replace(h100, attention_efficiency=0.4)  # a catalog figure replaces the curves
    assert Costs(own, EFF, Layout(), SPEC).flash_attention(flops)[1] == pytest.approx(2.5 * flops / (989.4e12 * 0.4))


@pytest.mark.parametrize(
    ("text", "kernel"),
    [
        ("Composer / llm-foundry, attn_impl: triton", "triton"),
        ("attn_impl=triton", "triton"),
        ("FlashAttention-2", "fa2"),
        ("flash-attn 2.4.2", "fa2"),
        ("flash_attn==2.5.8", "fa2"),
        ("FA2", "fa2"),
        ("torch SDPA", "fa2"),
        ("F.scaled_dot_product_attention", "fa2"),
        ("FlashAttention-3 (Hopper)", "fa3"),
        ("FA3", "fa3"),
        ("flash_attn_interface (hopper)", "fa3"),
        ("TE fused attention (cuDNN)", "cudnn"),
        ("attention=cudnn_flash_te", "cudnn"),
        ("NVTE_FUSED_ATTN=1 FusedAttention", "cudnn"),
        ("xformers memory-efficient attention", "xformers"),
        ("flash-attn 1.0.9", "fa1"),
        ("FlashAttention v1", "fa1"),
        ("flash attention", None),
        ("Megatron-Core", None),
        ("", None),
    ],
)
def test_kernel_from_text(text: str, kernel: str | None) -> None:
    assert ak.kernel_from_text(text) == kernel


def test_default_kernel_per_framework_and_part() -> None:
    assert ak.default_kernel("megatron", "hopper") == "cudnn"
    assert ak.default_kernel("megatron", "ampere") == "fa2"
    assert ak.default_kernel("maxtext", "blackwell") == "cudnn"
    assert ak.default_kernel("fsdp2", "hopper") == "fa2"
    with pytest.raises(Exception, match="attn_kernel"):
        predict(SPEC, Layout(attn_kernel="fa9"), CAT.get("h100-sxm"), 8)


def test_busbw_fraction_per_link_level() -> None:
    from stride.perfmodel import collectives as coll

    h100 = CAT.get("h100-sxm")
    assert coll.group_link(h100, 8, 1).bw == pytest.approx(450e9 * 0.81)
    assert coll.group_link(h100, 16, 8).bw == pytest.approx(50e9 * 0.94)
    assert coll.group_link(h100, 16, 8, net_efficiency=0.5).bw == pytest.approx(50e9 * 0.94 * 0.5)


def test_hybrid_sharding_keeps_gathers_inside_the_group() -> None:
    spec = TransformerSpec(32, 4096, 32, 32, 11008, "swiglu", 32000, 4096, name="7b")
    hw = CAT.get("h100-sxm")
    base = Layout(dp=64, zero=3, micro_batch=2, framework="fsdp2")
    full = predict(spec, base, hw, 128, EFF)
    hsdp = predict(spec, dataclasses.replace(base, shard=8), hw, 128, EFF)
    # full sharding gathers over all 64 ranks across nodes; hybrid only over NVLink, plus one all-reduce
    # of its 1/8 fp32 gradient shard across the 8 replicas (one rank per node each)
    shard_grads = total_params(spec) * 4 / 8
    assert hsdp.comm_bytes_per_device["scale-out"] == pytest.approx(2 * 7 / 8 * shard_grads)
    assert full.comm_bytes_per_device["scale-out"] > 8 * hsdp.comm_bytes_per_device["scale-out"]
    p = full.memory_bytes["optimizer"] * 64 / 8  # optimizer state sharded 8 ways, not 64
    assert hsdp.memory_bytes["optimizer"] == pytest.approx(p)
    assert "zero3/8" in hsdp.layout.short()
    with pytest.raises(Exception, match="shard group"):
        predict(spec, dataclasses.replace(base, shard=6), hw, 128, EFF)


def test_xla_fuses_into_dots_on_tpus_only() -> None:
    lay = Layout(framework="maxtext")
    gpu = Costs(CAT.get("h100-sxm"), EFF, lay, SPEC).elementwise_per_token(1)
    tpu = Costs(CAT.get("tpu-v5p"), EFF, lay, SPEC).elementwise_per_token(1)
    megatron = Costs(CAT.get("h100-sxm"), EFF, Layout(), SPEC).elementwise_per_token(1)
    assert tpu == (8 * 2048, 0.0)
    assert gpu == megatron  # XLA:GPU runs its fused elementwise loops around cuBLAS like fused kernels


def test_torch_checkpointing_stops_before_the_blocks_last_gemm() -> None:
    """Non-reentrant torch checkpointing (FSDP, torchtitan, torchtune) and XLA re-run the block's forward only
    up to the last tensor backward needs: the MLP down projection is not recomputed. Megatron re-runs it all."""
    from stride.perfmodel.block_time import block_time

    hw = CAT.get("h100-sxm")
    tokens = 2048
    down = next(g for g in layer_gemms(SPEC, tokens) if g.name == "mlp_out")
    for fw, early in (("fsdp2", True), ("fsdp1", True), ("maxtext", True), ("megatron", False), ("deepspeed", False)):
        full = Layout(framework=fw, recompute="full")
        c = Costs(hw, EFF, full, SPEC)
        rc = block_time(SPEC, full, hw, EFF, c, tokens).terms["gemm"]
        none = block_time(SPEC, Layout(framework=fw), hw, EFF, c, tokens).terms["gemm"]
        fwd = sum(c.gemm(g) for g in layer_gemms(SPEC, tokens) if g.name not in ("attn_scores", "attn_values"))
        want = fwd - c.gemm(down) if early else fwd
        assert rc - none == pytest.approx(want, rel=1e-9), fw


def test_selective_recompute_of_a_flash_core_reruns_its_forward() -> None:
    """Megatron's selective recompute checkpoints core attention and MaxText's minimal policies do not save a
    flash kernel's softmax statistics: the core's forward runs again in backward (none: it does not)."""
    from stride.perfmodel.block_time import block_time

    hw = CAT.get("h100-sxm")
    for fw in ("megatron", "maxtext"):
        c = Costs(hw, EFF, Layout(framework=fw), SPEC)
        t = {rc: block_time(SPEC, Layout(framework=fw, recompute=rc), hw, EFF, c, 2048).terms["attention"]
             for rc in ("none", "selective")}
        core = sum(g.flops for g in layer_gemms(SPEC, 2048) if g.name in ("attn_scores", "attn_values"))
        fwd, _ = c.flash_attention(core * 0.5)
        assert t["selective"] - t["none"] == pytest.approx(fwd, rel=1e-9), fw
