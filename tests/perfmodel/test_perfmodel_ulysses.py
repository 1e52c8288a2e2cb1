"""DeepSpeed-Ulysses: all-to-all (head-parallel) attention inside context parallelism. Hand computations against
collectives.all_to_all_time, a whole predicted step, the USP Ulysses x ring hybrid, and how rows name it."""

from __future__ import annotations

import dataclasses

import pytest

from stride.config.errors import ConfigError
from stride.perfmodel import collectives as coll
from stride.perfmodel import row_text as rt
from stride.perfmodel.attention_kernels import kernel_from_text
from stride.perfmodel.block_time import cp_ring_time
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.flops import ATTENTION_CORE, layer_gemms
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.kernels import Costs
from stride.perfmodel.layout import Layout, check_layout
from stride.perfmodel.model_spec import PRESETS
from stride.perfmodel.published import row_inputs

EFF = Efficiency(overlap=0.85)


def test_all_to_all_inside_and_across_domains_by_hand() -> None:
    h100 = load_catalog().get("h100")
    up = h100.scaleup_bw_gbps * 1e9 * h100.scaleup_busbw_fraction
    nic = h100.scaleout_bw_gbps * 1e9 * h100.scaleout_busbw_fraction
    s = 64e6
    # 8 ranks in one node: 7/8 of the buffer over NVLink, 7 latencies
    assert coll.all_to_all_time(s, 8, h100) == pytest.approx(7 * h100.scaleup_latency_us * 1e-6 + 7 / 8 * s / up)
    # 32 ranks over 4 nodes: 24/32 leave through the rank's own NIC (not 8 NICs pooled), 7/32 stay inside
    t = coll.all_to_all_time(s, 32, h100)
    assert t == pytest.approx(31 * h100.scaleout_latency_us * 1e-6 + max(7 / 32 * s / up, 24 / 32 * s / nic))
    pooled = coll.group_link(h100, 32)
    assert t > 31 / 32 * s / pooled.bw  # a ring's pooled NICs would be far faster
    # stride 4: 2 of the 8 ranks share a node
    assert coll.all_to_all_time(s, 8, h100, stride=4) == pytest.approx(
        7 * h100.scaleout_latency_us * 1e-6 + max(1 / 8 * s / up, 6 / 8 * s / nic))
    assert coll.all_to_all_time(s, 1, h100) == 0.0


def _case(**kw: object) -> tuple[Layout, object, object]:
    spec = dataclasses.replace(PRESETS["llama3-8b"], seq=65536)
    lay = Layout(dp=1, tp=1, cp=16, zero=1, **kw)  # type: ignore[arg-type]
    return lay, spec, load_catalog().get("a100-80gb")


def test_predicted_step_charges_four_all_to_alls_each_way() -> None:
    lay, spec, hw = _case(ulysses=16)
    tokens = spec.seq // 16
    # q and the output: 4096 tokens x 4096 wide x 2 B; k and v: 8 KV heads repeated to 16 (one a rank) x 128 x 2 B
    q = tokens * 4096 * 2
    kv = tokens * 16 * 128 * 2
    one_way = 2 * coll.all_to_all_time(q, 16, hw) + 2 * coll.all_to_all_time(kv, 16, hw)
    got = predict(spec, lay, hw, 1, EFF).breakdown_s["cp_comm"]
    assert got == pytest.approx(spec.layers * 2 * one_way, rel=1e-9)  # forward and backward, no recompute
    full = predict(spec, dataclasses.replace(lay, recompute="full"), hw, 1, EFF).breakdown_s["cp_comm"]
    assert full == pytest.approx(spec.layers * 3 * one_way, rel=1e-9)  # the recomputed core's forward again
    ring = predict(spec, dataclasses.replace(lay, ulysses=1), hw, 1, EFF)
    assert ring.breakdown_s["cp_comm"] < got  # 16 ranks over 2 nodes: the a2a's share leaves by one NIC a rank


def test_hybrid_runs_the_ring_over_the_rest_of_cp() -> None:
    lay, spec, hw = _case(ulysses=4)
    c = Costs(hw, EFF, lay, spec)
    tokens = spec.seq // 16
    q, kv = tokens * 4096 * 2, tokens * 8 * 128 * 2  # 8 KV heads: 2 a rank after the a2a, none repeated
    a2a = 2 * (2 * coll.all_to_all_time(q, 4, hw) + 2 * coll.all_to_all_time(kv, 4, hw))
    core = [g for g in layer_gemms(spec, tokens, 1, 16) if g.name in ATTENTION_CORE]
    core_f, core_b = c.flash_attention(sum(g.flops for g in core) * 0.5)
    # the ring: 4 ranks spaced 4 apart (two per node), passing what a rank holds after the a2a: 2 x kv
    t_ring, _ = cp_ring_time(2 * kv, 4, coll.group_link(hw, 4, 4), core_f, core_b, False, EFF)
    got = predict(spec, lay, hw, 1, EFF).breakdown_s["cp_comm"]
    assert got == pytest.approx(spec.layers * (a2a + t_ring), rel=1e-9)


def test_layout_refuses_a_degree_that_does_not_divide() -> None:
    spec = PRESETS["llama3-8b"]
    with pytest.raises(ConfigError, match="Ulysses degree 3 must divide cp=4"):
        check_layout(Layout(dp=2, cp=4, ulysses=3), spec, 8)
    with pytest.raises(ConfigError, match="Ulysses degree 4"):  # 32 heads / tp 16 = 2 a rank
        check_layout(Layout(dp=1, tp=16, cp=4, ulysses=4), spec, 8)
    assert "cp8/ulysses4" in Layout(cp=8, ulysses=4).short()


@pytest.mark.parametrize(("framework", "everything", "cp", "u"), [
    ("USP (yunchang): context parallel 16 = ulysses 8 x ring 2", "", 16, 8),
    ("SP-Ring = Megatron-Core context parallel, SP-Ulysses = all-to-all; ulysses 1 x ring 4", "", 4, 1),
    ("DeepSpeed-Ulysses: all-to-all head-parallel attention, --sequence-parallel-size 8 = cp here", "", 8, 8),
    ("XTuner sequence parallel size 8 (Ulysses-style all-to-all)", "", 8, 8),
    ("ulysses-degree 2, ring-degree 2", "", 4, 2),
    ("Megatron-Core", "--cp-comm-type a2a", 4, 4),
    ("Megatron-Core", "--cp-comm-type a2a+p2p", 4, 1),  # the hierarchical form: sizes not read
    ("Megatron-Core, ring attention (Transformer Engine p2p)", "", 4, 1),
    ("no Ulysses; Megatron-Core context parallel", "", 4, 1),
    ("DeepSpeed-Ulysses", "", 1, 1),
])
def test_rows_name_the_degree(framework: str, everything: str, cp: int, u: int) -> None:
    assert rt.ulysses(framework, everything, cp) == u


def test_a_row_reads_ulysses_and_the_triton_flash_kernel() -> None:
    row = {"row_id": "r", "model": "GPT 7B", "layers": "32", "hidden": "4096", "heads": "32", "kv_heads": "32",
           "ffn_hidden": "16384", "ffn_act": "gelu", "vocab": "50304", "seq_len": "131072", "global_batch_seqs": "8",
           "micro_batch": "1", "gpu": "A100 SXM 80GB", "num_gpus": "256", "gpus_per_node": "8", "tp": "1", "pp": "1",
           "dp": "8", "cp": "32", "zero_or_fsdp": "zero3", "recompute": "full", "precision": "fp16",
           "framework": "Megatron-DeepSpeed + DeepSpeed-Ulysses (all-to-all head-parallel attention, degree 32); "
                        "FlashAttention Triton kernel"}
    inp = row_inputs(row, load_catalog())
    assert inp.reason is None, inp.reason
    assert inp.layout.ulysses == 32 and inp.layout.cp == 32
    assert inp.layout.attn_kernel == "triton"  # blind round 20: read as FlashAttention-2 before (+96 / +102%)
    assert kernel_from_text("FlashAttention Triton kernel") == "triton"
    assert kernel_from_text("flash_attn_triton") == "triton"
