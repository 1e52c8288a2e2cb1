"""Context parallelism: Transformer Engine's K/V ring hides each transfer under one step of attention, at the
bandwidth of the NCCL channels the cp communicator may use; torchtitan / XLA all-gather K/V instead.
Hand computations against block_time.cp_ring_time, collectives.channel_capped and a whole predicted step."""

from __future__ import annotations

import dataclasses

import pytest

from stride.perfmodel import collectives as coll
from stride.perfmodel import row_text as rt
from stride.perfmodel.block_time import cp_ring_time, exposed
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.flops import ATTENTION_CORE, layer_gemms
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.kernels import Costs
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import PRESETS
from stride.perfmodel.published import row_inputs

EFF = Efficiency(overlap=0.85)


def test_ring_step_hides_under_one_step_of_attention_by_hand() -> None:
    # 4 MB K/V chunk over a 40 GB/s, 3 us link: one transfer 3 + 100 = 103 us. cp = 4: 3 transfers.
    # Forward: each under 400/4 = 100 us of attention: 3 us left over + 15% of the 100 hidden = 18 us.
    # Backward (K/V and dK/dV, 206 us) under 1000/4 = 250 us: all hidden, 15% of it costs 30.9 us.
    link = coll.Link("scale-up", 40e9, 3e-6)
    t, sent = cp_ring_time(4e6, 4, link, 400e-6, 1000e-6, False, EFF)
    assert t == pytest.approx(3 * (18e-6 + 30.9e-6), rel=1e-9)
    assert sent == pytest.approx(3 * 3 * 4e6)
    # a recomputed core runs the forward ring again
    t_rc, sent_rc = cp_ring_time(4e6, 4, link, 400e-6, 1000e-6, True, EFF)
    assert t_rc == pytest.approx(t + 3 * 18e-6, rel=1e-9)
    assert sent_rc == pytest.approx(4 * 3 * 4e6)
    # the whole-core window of the earlier model would have hidden all of it (15% of 309 us forward)
    whole = exposed(3 * 103e-6, 400e-6, EFF)
    assert t > whole


def test_channel_cap_per_part_and_level() -> None:
    cat = load_catalog()
    h100, gb200, mi300x = cat.get("h100"), cat.get("gb200"), cat.get("mi300x")
    up = coll.group_link(h100, 2, 1)
    assert coll.channel_capped(up, h100, 0) is up  # no cap: NCCL's own channel count, the link's busbw
    assert coll.channel_capped(up, h100, 1).bw == pytest.approx(20.6e9)  # topo.h SM90_NVLINK_BW
    assert coll.channel_capped(up, h100, 4).bw == pytest.approx(4 * 20.6e9)
    assert coll.channel_capped(up, h100, 64).bw == up.bw  # never above the link
    assert coll.channel_capped(coll.group_link(gb200, 4, 2), gb200, 1).bw == pytest.approx(40.1e9)  # SM100
    out = coll.group_link(h100, 2, 8)
    assert out.name == "scale-out"
    assert coll.channel_capped(out, h100, 1).bw == pytest.approx(14e9)  # NCCL_P2P_PER_CHANNEL_NET_BW
    rccl = coll.group_link(mi300x, 2, 1)
    assert coll.channel_capped(rccl, mi300x, 1) is rccl  # no NCCL figure for RCCL: unchanged


def _cp_case(**kw: object) -> tuple[Layout, object, object]:
    spec = PRESETS["llama3-8b"]
    lay = Layout(dp=64, tp=2, sp=True, cp=4, zero=1, precision="fp8", fp8_recipe="tensorwise", tp_overlap=True,
                 **kw)  # type: ignore[arg-type]
    return lay, spec, load_catalog().get("gb200")


def test_predicted_step_charges_the_ring_per_layer() -> None:
    lay, spec, hw = _cp_case(cp_channels=1)
    c = Costs(hw, EFF, lay, spec)
    tokens = spec.seq // lay.cp
    core = [g for g in layer_gemms(spec, tokens, lay.tp, lay.cp) if g.name in ATTENTION_CORE]
    core_f, core_b = c.flash_attention(sum(g.flops for g in core) * 0.5)
    kv_chunk = tokens * 2 * spec.kv_dim * 2 / lay.tp  # 2048 tokens x K,V x 512 x 2 B = 4 MiB
    assert kv_chunk == 4 * 2**20
    link = coll.Link("scale-up", 40.1e9, hw.scaleup_latency_us * 1e-6)  # one channel
    per_layer, _ = cp_ring_time(kv_chunk, 4, link, core_f, core_b, False, EFF)
    capped = predict(spec, lay, hw, 64, EFF)
    assert capped.breakdown_s["cp_comm"] == pytest.approx(spec.layers * per_layer, rel=1e-9)
    free = predict(spec, dataclasses.replace(lay, cp_channels=0), hw, 64, EFF)
    assert free.breakdown_s["cp_comm"] < 0.2 * capped.breakdown_s["cp_comm"]
    # the step grows by the exposed ring, less what of the parameter all-gather now hides under the longer forward
    delta = capped.breakdown_s["cp_comm"] - free.breakdown_s["cp_comm"]
    assert 0.9 * delta < capped.step_time_s - free.step_time_s <= delta * (1 + 1e-9)


def test_torchtitan_keeps_the_kv_all_gather() -> None:
    lay, spec, hw = _cp_case(cp_channels=1)
    lay = dataclasses.replace(lay, framework="fsdp2", zero=3, tp_overlap=False)
    c = Costs(hw, EFF, lay, spec)
    tokens = spec.seq // lay.cp
    core = [g for g in layer_gemms(spec, tokens, lay.tp, lay.cp) if g.name in ATTENTION_CORE]
    core_f, core_b = c.flash_attention(sum(g.flops for g in core) * 0.5)
    kv = tokens * lay.cp * 2 * spec.kv_dim * 2 / lay.tp
    link = coll.group_link(hw, lay.cp, lay.tp)
    raw = coll.all_gather_time(kv, lay.cp, link) + coll.reduce_scatter_time(kv, lay.cp, link)
    got = predict(spec, lay, hw, 64, EFF).breakdown_s["cp_comm"]
    assert got == pytest.approx(spec.layers * exposed(raw, core_f + core_b, EFF), rel=1e-9)


@pytest.mark.parametrize(("text", "channels"), [
    ("NCCL per-communicator CTAs (conf/nccl/custom_communicator_cta.yaml): cp min_ctas 1 max_ctas 1, "
     "dp_cp max_ctas 8", 1),
    ("cp:\n  cga_cluster_size: 1\n  min_ctas: 1\n  max_ctas: 1\ndp_cp:\n  max_ctas: 8", 1),
    ("dp_cp: max_ctas: 8", 0),  # the data-parallel x cp communicator, not cp's
    ("tp_cp max_ctas 3", 0),
    ("NCCL_MAX_CTAS=4", 4),
    ("NCCL_MAX_NCHANNELS = 2", 2),
    ("NeMo, TP_COMM_OVERLAP=True", 0),
])
def test_cp_channels_from_text(text: str, channels: int) -> None:
    assert rt.cp_channels(text) == channels


def test_row_reads_the_cap_only_with_context_parallelism() -> None:
    row = {"row_id": "r", "model": "Llama 3.1 8B", "layers": "32", "seq_len": "8192", "global_batch_seqs": "64",
           "gpu": "NVIDIA GB200", "num_gpus": "512", "tp": "2", "cp": "4", "dp": "64", "sp": "True",
           "precision": "FP8=True FP8_RECIPE=tensorwise", "recompute": "none",
           "framework": "NVIDIA NeMo; NCCL per-communicator CTAs: cp min_ctas 1 max_ctas 1, dp_cp max_ctas 8"}
    inp = row_inputs(row, load_catalog())
    assert inp.reason is None, inp.reason
    assert inp.layout.cp_channels == 1
    flat = row_inputs({**row, "cp": "1", "dp": "256", "global_batch_seqs": "256"}, load_catalog())
    assert flat.reason is None, flat.reason
    assert flat.layout.cp_channels == 0


# --- the planner's search over context parallelism (long sequences) ---

def test_context_degrees_keep_min_tokens_a_rank_and_the_2cp_split() -> None:
    from stride.perfmodel.planner import MIN_CP_TOKENS, context_degrees
    assert context_degrees(4096, 64, True) == [1]  # 2,048 tokens a rank at cp2: below the floor
    assert context_degrees(8192, 64, True) == [1, 2]  # MLPerf's Llama 3.1 8B: cp2 at 8,192 tokens
    assert context_degrees(131072, 64, True) == [1, 2, 4, 8, 16, 32]
    assert context_degrees(131072, 12, True) == [1, 2, 4]  # cp must divide the devices
    assert context_degrees(131072, 64, False) == [1]  # a framework without context parallelism
    assert all(131072 // c >= MIN_CP_TOKENS for c in context_degrees(131072, 1024, True))


def test_search_tries_cp_only_where_the_framework_runs_it() -> None:
    from stride.perfmodel.planner import candidate_layouts
    hw = load_catalog().get("h100-sxm")
    spec = dataclasses.replace(PRESETS["llama3-8b"], seq=65536)
    for fw, runs_cp in (("megatron", True), ("fsdp2", True), ("deepspeed", False), ("fsdp1", False)):
        lays = candidate_layouts(spec, hw, 32, 32, framework=fw)
        cps = {lay.cp for lay in lays}
        assert (cps == {1, 2, 4, 8, 16}) is runs_cp, (fw, cps)
        assert all(lay.devices == 32 for lay in lays)


def test_long_sequence_plan_uses_context_parallelism_like_nemo() -> None:
    # NeMo's long-sequence table (performance_summary, Llama 2 7B on H100): 131,072 tokens on 128 GPUs ran
    # tp4 cp4 at 555 TFLOP/s a GPU, 1M tokens on 1,024 GPUs tp8 cp32 at 536 (0.97x). Without cp the search could
    # only shard by tp and pp: its best plans fell from 34 % MFU to 1.4 % (pp32 at 1M tokens).
    from stride.perfmodel.planner import search
    hw = load_catalog().get("h100-sxm")
    mfu = {}
    for seq, n in ((131072, 128), (1048576, 1024)):
        spec = dataclasses.replace(PRESETS["llama2-7b"], seq=seq)
        best = search(spec, hw, n, 1048576 * 4 // seq).best
        assert best is not None and best.layout.cp >= 8, best
        mfu[seq] = best.mfu
    assert mfu[1048576] / mfu[131072] > 0.8


@pytest.mark.parametrize("text, unbalanced", [
    ("MaxText, ici_context_parallelism=64, no load balancing, packing off", True),
    ("context_parallel_load_balance: false", True),
    ("torchtitan CP with _cp_options load_balance=False", True),
    ("without context parallel load balancing", True),
    # a MoE router's balancing is not the sequence split's
    ("aux-loss-free load balancing, no load balancing loss", False),
    ("--moe-router-force-load-balancing", False),
    ("SP-Ring with the load-balanced (zigzag) token reordering", False),
])
def test_cp_without_load_balancing_from_text(text: str, unbalanced: bool) -> None:
    assert rt.cp_unbalanced(text) is unbalanced


def test_unbalanced_cp_charges_the_last_chunks_attention_by_hand() -> None:
    """Contiguous chunks under the causal mask: over r ranks chunk i attends to i whole chunks and half its own, so the
    last rank does (r - 1/2) chunk-squares of work against a mean of r/2: (2r - 1) / r. MaxText's 64-way CP rows
    without load balancing (round 33) read 1.4-2x fast when every rank was given the mean."""
    hw, spec = load_catalog().get("h100-sxm"), dataclasses.replace(PRESETS["llama3-8b"], seq=65536)
    base = Layout(dp=1, cp=8, zero=3, micro_batch=1, framework="megatron", precision="bf16")
    even = predict(spec, base, hw, 1, EFF).breakdown_s["attention"]
    late = predict(spec, dataclasses.replace(base, cp_unbalanced=True), hw, 1, EFF).breakdown_s["attention"]
    assert late == pytest.approx(even * 15 / 8, rel=1e-9)
    # Ulysses ranks hold the whole sequence for their heads: only the ring part of cp is uneven (ring 2: 3/2)
    usp = dataclasses.replace(base, ulysses=4)
    even = predict(spec, usp, hw, 1, EFF).breakdown_s["attention"]
    late = predict(spec, dataclasses.replace(usp, cp_unbalanced=True), hw, 1, EFF).breakdown_s["attention"]
    assert late == pytest.approx(even * 3 / 2, rel=1e-9)


def test_row_reads_unbalanced_cp_only_with_context_parallelism() -> None:
    row = {"row_id": "r", "model": "Llama 3 8B", "layers": "32", "seq_len": "65536", "global_batch_seqs": "1",
           "gpu": "H100 SXM", "num_gpus": "8", "tp": "1", "cp": "8", "dp": "1", "precision": "bf16",
           "recompute": "full", "framework": "MaxText, ici_context_parallelism=8, no load balancing"}
    inp = row_inputs(row, load_catalog())
    assert inp.reason is None, inp.reason
    assert inp.layout.cp_unbalanced and any("load balancing" in n for n in inp.notes)
    flat = row_inputs({**row, "cp": "1", "dp": "8", "global_batch_seqs": "8"}, load_catalog())
    assert flat.reason is None, flat.reason
    assert not flat.layout.cp_unbalanced
