"""Cost-model formulas: activation memory against Korthikanti et al.'s closed forms, pipeline
bubble (p-1)/(m v), ZeRO memory sharding, and saved-for-backward bytes of a real torch block."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from stride.perfmodel.activations import layer_activation_bytes
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import PRESETS, TransformerSpec

GPT175 = PRESETS["gpt3-175b"]


@pytest.mark.parametrize("tp", [1, 8])
def test_activations_match_korthikanti_closed_forms(tp: int) -> None:
    s, b, h, a = GPT175.seq, 1, GPT175.hidden, GPT175.heads
    sbh = s * b * h
    # no parallelism tricks: sbh(10 + 24/t + 5as/(ht))
    got = layer_activation_bytes(GPT175, b, tp, sp=False, recompute="none", flash=False)
    assert got == pytest.approx(sbh * (10 + 24 / tp + 5 * a * s / (h * tp)), rel=1e-12)
    if tp > 1:  # sequence parallel: sbh/t (34 + 5as/h); + selective recompute: 34 sbh/t
        got = layer_activation_bytes(GPT175, b, tp, sp=True, recompute="none", flash=False)
        assert got == pytest.approx(sbh / tp * (34 + 5 * a * s / h), rel=1e-12)
        got = layer_activation_bytes(GPT175, b, tp, sp=True, recompute="selective", flash=False)
        assert got == pytest.approx(34 * sbh / tp, rel=1e-12)
    assert layer_activation_bytes(GPT175, b, tp, recompute="full") == 2 * sbh  # the block input


def _no_comm_hw():
    hw = load_catalog().get("a100-80gb")
    return dataclasses.replace(hw, scaleup_latency_us=0.0, scaleout_latency_us=0.0,
                               scaleup_bw_gbps=1e12, scaleout_bw_gbps=1e12)


@pytest.mark.parametrize(("p", "v", "m"), [(4, 1, 8), (4, 2, 8), (8, 3, 24)])
def test_pipeline_bubble_is_p_minus_1_over_m_v(p: int, v: int, m: int) -> None:
    """Equal stages (a tiny vocabulary, so the logits and embedding are negligible): the bubble is
    (p-1)/v mean stage times against m slowest-stage times."""
    spec = dataclasses.replace(GPT175, layers=p * v * 4, vocab=8)
    sched = "interleaved" if v > 1 else "1f1b"
    pred = predict(spec, Layout(tp=8, pp=p, schedule=sched, vpp=v, sp=True), _no_comm_hw(), m)
    bd = pred.breakdown_s
    busy = sum(val for k, val in bd.items() if k not in ("pp_bubble", "optimizer", "dp_comm"))
    assert bd["pp_bubble"] / busy == pytest.approx((p - 1) / (m * v), rel=5e-3)  # the embedding: 0.1%


def test_uneven_stages_run_at_the_pace_of_the_fullest() -> None:
    """25 blocks on 4 stages: the fullest holds 7, so a micro-batch costs 7 blocks' time, not 25/4."""
    even = dataclasses.replace(GPT175, layers=28, vocab=8)
    odd = dataclasses.replace(GPT175, layers=25, vocab=8)
    lay = Layout(tp=8, pp=4, schedule="1f1b", sp=True)
    a = predict(even, lay, _no_comm_hw(), 8).breakdown_s["gemm"]
    b = predict(odd, dataclasses.replace(lay, stage_split="uneven"), _no_comm_hw(), 8).breakdown_s["gemm"]
    assert b / a == pytest.approx(7 / 7, rel=1e-9)  # 28 -> 7 per stage; 25 -> [6, 7, 6, 6]: also 7
    c = predict(dataclasses.replace(GPT175, layers=26, vocab=8), dataclasses.replace(lay, stage_split="embedding-loss"),
                _no_comm_hw(), 8).breakdown_s["gemm"]
    assert c / a == pytest.approx(7 / 7, rel=1e-9)  # 28 units (26 + embedding + loss) / 4 = 7 per stage


def test_zero_stages_shard_states_as_stated() -> None:
    spec, hw = PRESETS["llama3-8b"], load_catalog().get("h100")
    mem = {z: predict(spec, Layout(dp=8, zero=z), hw, 8).memory_bytes for z in (0, 1, 2, 3)}
    n = mem[0]["params"] / 2  # parameters on the device, from the 2-byte bf16 copy
    assert mem[0]["optimizer"] == pytest.approx(12 * n) and mem[1]["optimizer"] == pytest.approx(12 * n / 8)
    assert mem[1]["grads"] == pytest.approx(4 * n) and mem[2]["grads"] == pytest.approx(4 * n / 8)
    assert mem[2]["params"] == pytest.approx(2 * n) and mem[3]["params"] == pytest.approx(2 * n / 8)


def test_recompute_trades_time_for_memory_and_overlap_hides_dp() -> None:
    spec, hw = PRESETS["llama3-8b"], load_catalog().get("h100")
    base = Layout(dp=16, zero=1, micro_batch=1)
    none, full = predict(spec, base, hw, 64), predict(spec, dataclasses.replace(base, recompute="full"), hw, 64)
    assert full.step_time_s > none.step_time_s and full.peak_mem_bytes < none.peak_mem_bytes
    no_ov = predict(spec, dataclasses.replace(base, dp_overlap=False), hw, 64)
    assert no_ov.breakdown_s["dp_comm"] > none.breakdown_s["dp_comm"]
    eff = Efficiency(overlap=1.0)
    assert predict(spec, base, hw, 64, eff).step_time_s <= none.step_time_s
    # HFU counts the recomputed forward (4/3 of model FLOPs for the blocks), MFU does not
    assert none.hfu == pytest.approx(none.mfu) and 0 < full.mfu < full.hfu < 1.0
    assert 1.25 < full.hfu * full.step_time_s / (full.mfu * full.step_time_s) < 4 / 3


class _Block(nn.Module):
    """A GPT block without dropout, materialised attention: what the analytic count describes."""

    def __init__(self, s: TransformerSpec):
        super().__init__()
        h = s.hidden
        self.s = s
        self.n1, self.n2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.out = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, s.ffn), nn.Linear(s.ffn, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        nh, d = self.s.heads, self.s.head_dim
        q, k, v = (y.view(b, t, nh, d).transpose(1, 2) for y in self.qkv(self.n1(x)).split(h, -1))
        a = (q @ k.transpose(-1, -2)).softmax(-1) @ v
        x = x + self.out(a.transpose(1, 2).reshape(b, t, h))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.n2(x))))


def test_saved_activation_bytes_of_a_real_block() -> None:
    """Sum the distinct tensors autograd saves for one bf16 block; within 2% of the formula
    (measured 1.001x: torch also keeps LayerNorm's fp32 mean and rstd, which the formula omits)."""
    spec = TransformerSpec(1, 256, 4, 4, 1024, "gelu", 100, 128, bias=True, dropout=False)
    blk = _Block(spec).to(torch.bfloat16)
    x = torch.randn(2, spec.seq, spec.hidden, dtype=torch.bfloat16, requires_grad=True)
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        seen[st.data_ptr()] = max(seen.get(st.data_ptr(), 0), st.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        blk(x)
    params = {p.untyped_storage().data_ptr() for p in blk.parameters()}
    measured = sum(n for ptr, n in seen.items() if ptr not in params)
    predicted = layer_activation_bytes(spec, 2, recompute="none", flash=False)
    print(f"saved-for-backward: measured {measured} B, formula {predicted} B, ratio {measured / predicted:.3f}")
    assert measured == pytest.approx(predicted, rel=0.02)


def test_moe_counts_top_k_experts_and_routes_tokens() -> None:
    """A block of 8 experts with top-2 has the dense block's attention and 2 MLPs' FLOPs per token;
    expert parallelism splits the experts' weights, not the FLOPs."""
    from stride.perfmodel.flops import layer_forward_flops, layer_params

    dense = TransformerSpec(2, 512, 8, 8, 2048, "swiglu", 1000, 256, name="d")
    moe = dataclasses.replace(dense, experts=8, top_k=2, name="m")
    mlp = 2 * 256 * 3 * 512 * 2048  # one token batch of 256 through one swiglu MLP
    router = 2 * 256 * 512 * 8
    assert layer_forward_flops(moe, 256, True) == pytest.approx(layer_forward_flops(dense, 256) + mlp + router)
    assert layer_params(moe, True) == layer_params(dense) - 3 * 512 * 2048 + 8 * 3 * 512 * 2048 + 512 * 8
    hw = load_catalog().get("h100")
    one = predict(moe, Layout(dp=8), hw, 8)
    four = predict(moe, Layout(dp=8, ep=4), hw, 8)
    assert four.breakdown_s["ep_comm"] > 0 and one.breakdown_s["ep_comm"] == 0
    assert four.memory_bytes["params"] < one.memory_bytes["params"]


@pytest.mark.parametrize(("act", "mats"), [("gelu", 2), ("relu", 2), ("squared-relu", 2), ("silu", 2), ("swiglu", 3),
                                           ("geglu", 3)])
def test_activation_sets_the_mlp_matrices(act: str, mats: int) -> None:
    from stride.perfmodel.flops import layer_params

    s = TransformerSpec(1, 256, 4, 4, 1024, act, 100, 64)
    assert layer_params(s) == 4 * 256 * 256 + mats * 256 * 1024 + 2 * 256


def test_head_dim_apart_from_hidden() -> None:
    """MaxText-style: 8 heads of 256 on a 1024-wide model: q/k/v/o are 1024 x 2048 (not 1024 x 1024)."""
    from stride.perfmodel.flops import layer_params

    s = TransformerSpec(1, 1024, 8, 8, 4096, "relu", 100, 64, head_dim_override=256)
    assert s.q_dim == 2048 and layer_params(s) == 4 * 1024 * 2048 + 2 * 1024 * 4096 + 2 * 1024


def test_context_parallel_ranks_reduce_gradients_and_shard_states() -> None:
    """cp ranks hold the same weights: their gradients are summed and ZeRO shards over dp x cp (Megatron's
    dp-cp group, torchtitan's dp_shard_cp). Before, a cp2 dp1 run had no gradient reduction at all."""
    spec, hw = PRESETS["llama3-8b"], load_catalog().get("h100")
    one = predict(spec, Layout(dp=1, cp=2, zero=0, dp_overlap=False), hw, 4)
    n = one.memory_bytes["params"] / 2  # parameters on the device (2-byte copy)
    s = n * 4  # Megatron reduces fp32 main gradients for bf16 runs
    link_bw = hw.scaleup_bw_gbps * 1e9 * hw.scaleup_busbw_fraction  # both ranks in one NVLink domain
    want = 2 * 1 * hw.scaleup_latency_us * 1e-6 + 2 * (1 / 2) * s / link_bw  # ring all-reduce over 2 ranks
    assert one.breakdown_s["dp_comm"] == pytest.approx(want, rel=1e-9)
    mem = {(dp, cp): predict(spec, Layout(dp=dp, cp=cp, zero=1), hw, 8).memory_bytes for dp, cp in
           ((4, 1), (2, 2), (2, 1))}
    assert mem[(2, 2)]["optimizer"] == pytest.approx(mem[(4, 1)]["optimizer"])
    assert mem[(2, 2)]["optimizer"] == pytest.approx(mem[(2, 1)]["optimizer"] / 2)
