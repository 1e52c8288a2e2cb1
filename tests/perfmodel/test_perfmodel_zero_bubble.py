"""Zero-bubble pipeline schedules in the cost model: their bubbles from the per-stage times F, B, W (Qi et al., ICLR
2024), the V-shape schedules' chunk placement and activation memory (Qi et al., NeurIPS 2024), and how rows and the
planner name them. Before, a row's "zbv" or "ZB-1p" was costed as interleaved or 1F1B (AMD's Primus pipeline blog:
the zero-bubble rows' gain over 1F1B was predicted as interleaving's)."""

from __future__ import annotations

import dataclasses

import pytest

from stride.config.errors import ConfigError
from stride.perfmodel import row_text as rt
from stride.perfmodel.costmodel import _mean_block, bubble_share, predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.kernels import Costs
from stride.perfmodel.layout import Layout, stage_blocks
from stride.perfmodel.model_spec import PRESETS
from stride.perfmodel.planner import candidate_layouts

GPT175 = PRESETS["gpt3-175b"]


def _no_comm_hw():
    hw = load_catalog().get("a100-80gb")
    return dataclasses.replace(hw, scaleup_latency_us=0.0, scaleout_latency_us=0.0,
                               scaleup_bw_gbps=1e12, scaleout_bw_gbps=1e12)


def _fbw(spec, lay: Layout, hw) -> tuple[float, float, float]:
    c = Costs(hw, Efficiency(), lay, spec)
    blk = _mean_block(spec, lay, hw, c.eff, c, lay.micro_batch * spec.seq, 1.0)
    w = blk.weight_grad
    return blk.total - blk.backward, blk.backward - w, w


@pytest.mark.parametrize("p", [4, 8])
def test_zero_bubble_bubbles_follow_f_b_w(p: int) -> None:
    """Equal stages, no communication: 1F1B's bubble is (p-1)/m of the busy time; ZB-H1 leaves (F+B-W)/(F+B+W) of
    it and ZB-H2 max(0, F+B-2W)/(F+B+W), with F, B, W the block's own forward, input- and weight-gradient times."""
    spec, hw, m = dataclasses.replace(GPT175, layers=p * 4, vocab=8), _no_comm_hw(), 4 * p
    base = Layout(tp=8, pp=p, schedule="1f1b", sp=True)
    f, b, w = _fbw(spec, base, hw)
    assert 0.3 < w / (f + b + w) < 0.4  # dgrad and wgrad GEMMs alike; attention's backward is all B
    bubbles = {}
    for sched in ("1f1b", "zb-h1", "zb-h2"):
        bd = predict(spec, dataclasses.replace(base, schedule=sched), hw, m).breakdown_s
        busy = sum(val for k, val in bd.items() if k not in ("pp_bubble", "optimizer", "dp_comm"))
        bubbles[sched] = bd["pp_bubble"] / busy
    assert bubbles["1f1b"] == pytest.approx((p - 1) / m, rel=5e-3)
    assert bubbles["zb-h1"] / bubbles["1f1b"] == pytest.approx((f + b - w) / (f + b + w), rel=1e-9)
    assert bubbles["zb-h2"] / bubbles["1f1b"] == pytest.approx(max(0.0, f + b - 2 * w) / (f + b + w), rel=1e-9)
    assert bubbles["zb-h2"] < bubbles["zb-h1"] < bubbles["1f1b"]


def test_without_weight_gradients_nothing_fills_the_bubble() -> None:
    """Frozen weights (LoRA) have no W: every zero-bubble schedule keeps 1F1B's bubble."""
    spec, hw = dataclasses.replace(GPT175, layers=32, vocab=8), _no_comm_hw()
    lay = Layout(tp=8, pp=4, schedule="zb-h2", sp=True, frozen=True)
    c = Costs(hw, Efficiency(), lay, spec)
    blk = _mean_block(spec, lay, hw, c.eff, c, spec.seq, 1.0)
    assert blk.weight_grad == 0.0
    assert bubble_share(lay, blk) == pytest.approx(1.0)
    assert bubble_share(dataclasses.replace(lay, schedule="zb-h1"), blk) == pytest.approx(1.0)


def test_v_shape_schedules_put_the_first_and_last_chunk_on_device_0() -> None:
    # 14 blocks over 2 x 4 chunks: [1, 2, 2, 2, 2, 2, 2, 1] (the remainder on the middle chunks first)
    assert stage_blocks(14, 4, 2, "uneven") == [1 + 2, 2 + 2, 2 + 2, 2 + 1]  # interleaved: chunks d and d + 4
    assert stage_blocks(14, 4, 2, "uneven", v_shape=True) == [1 + 1, 2 + 2, 2 + 2, 2 + 2]  # V: d and 7 - d
    spec, hw = dataclasses.replace(GPT175, layers=32), _no_comm_hw()  # a real vocabulary: the logits weigh
    zbv = predict(spec, Layout(tp=8, pp=4, schedule="zbv", vpp=2, sp=True), hw, 16)
    inter = predict(spec, Layout(tp=8, pp=4, schedule="interleaved", vpp=2, sp=True), hw, 16)
    assert zbv.breakdown_s["logits"] > 0 and zbv.breakdown_s["embedding"] > 0  # both on device 0, the slowest
    assert inter.breakdown_s["embedding"] == 0.0 and inter.breakdown_s["logits"] > 0  # the last device's
    # memory: device 0 (the most activations) holds the logits too under V; interleaved leaves them to the last
    logits = zbv.memory_bytes["buffers"] - inter.memory_bytes["buffers"]
    tokens, per_logit = spec.seq, (4.0, 10.0)  # fused loss, or bf16 logits + fp32 softmax and its gradient
    assert any(logits == pytest.approx(tokens * spec.vocab / 8 * k) for k in per_logit), logits


@pytest.mark.parametrize(("sched", "held"), [("1f1b", 8), ("zb-h1", 8), ("zbv", 8), ("zb-h2", 15),
                                             ("v-half", 5), ("v-min", 4)])
def test_activation_memory_is_the_schedules_micro_batches_in_flight(sched: str, held: int) -> None:
    """1F1B, ZB-H1 and V-ZB hold p micro-batches' activations on the first device, ZB-H2 2p - 1, V-Half
    (p + 2) // 2, V-Min (p + 4) // 3 (p = 8, m = 32, no recompute, so activations scale with them)."""
    spec, hw = PRESETS["llama3-8b"], load_catalog().get("h100")
    v = 2 if sched in ("zbv", "v-half", "v-min") else 1
    one = predict(spec, Layout(pp=8, schedule="1f1b", micro_batch=1), hw, 32).memory_bytes["activations"]
    got = predict(spec, Layout(pp=8, schedule=sched, vpp=v, micro_batch=1), hw, 32).memory_bytes["activations"]
    assert got / one == pytest.approx(held / 8, rel=1e-9)


def test_schedules_need_their_chunk_counts() -> None:
    spec, hw = PRESETS["llama3-8b"], load_catalog().get("h100")
    with pytest.raises(ConfigError, match="V-shape schedule zbv puts 2 chunks on each device: vpp=2, not 1"):
        predict(spec, Layout(pp=4, schedule="zbv"), hw, 16)
    with pytest.raises(ConfigError, match="vpp=2 needs an interleaved or a V-shape schedule"):
        predict(spec, Layout(pp=4, schedule="zb-h1", vpp=2), hw, 16)
    with pytest.raises(ConfigError, match="the zb-interleaved schedule needs vpp >= 2"):
        predict(spec, Layout(pp=4, schedule="zb-interleaved"), hw, 16)


@pytest.mark.parametrize("v", [2, 4])
def test_zero_bubble_interleaved_fills_the_interleaved_bubble(v: int) -> None:
    """torch's ScheduleInterleavedZeroBubble (stride's `zero_bubble`): ZB-H1's filling of the interleaved
    schedule's bubble, (F + B - W) / (F + B + W) of it; its warm-up adds one forward per hop, not two
    (`_get_warmup_ops(multiply_factor=1)`), so device 0 holds p micro-batches, as 1F1B, not p + (p - 1) / v."""
    spec, hw, p = dataclasses.replace(GPT175, layers=32, vocab=8), _no_comm_hw(), 4
    base = Layout(tp=8, pp=p, schedule="interleaved", vpp=v, sp=True)
    f, b, w = _fbw(spec, base, hw)
    inter = predict(spec, base, hw, 16)
    zbi = predict(spec, dataclasses.replace(base, schedule="zb-interleaved"), hw, 16)
    assert zbi.breakdown_s["pp_bubble"] / inter.breakdown_s["pp_bubble"] == pytest.approx((f + b - w) / (f + b + w),
                                                                                          rel=1e-9)
    one = predict(spec, dataclasses.replace(base, schedule="1f1b", vpp=1), hw, 16)
    assert zbi.memory_bytes["activations"] == pytest.approx(one.memory_bytes["activations"], rel=1e-9)
    assert inter.memory_bytes["activations"] / one.memory_bytes["activations"] == pytest.approx((p + (p - 1) / v) / p)
    assert zbi.step_time_s < inter.step_time_s


@pytest.mark.parametrize(("text", "want"), [
    ("ZB-1p", ("zb-h1", 1)), ("ZB-2p", ("zb-h2", 1)), ("zero bubble", ("zb-h1", 1)),
    ("zbb (zero-bubble)", ("zb-h1", 1)), ("zbv", ("zbv", 2)), ("V-ZB", ("zbv", 2)), ("ZBVZeroBubble", ("zbv", 2)),
    ("v-half", ("v-half", 2)), ("V-Min", ("v-min", 2)),
    ("interleaved 1F1B (1F1B-I)", ("interleaved", 2)), ("1F1B (Megatron-LM non-interleaved)", ("1f1b", 1)),
    ("ScheduleZBVZeroBubble", ("zbv", 2)), ("1F1B (zero bubble disabled)", ("1f1b", 1)),
    ("no zero-bubble, 1F1B", ("1f1b", 1)),
    ("ScheduleInterleavedZeroBubble", ("zb-interleaved", 2)), ("zero bubble, VPP=4", ("zb-interleaved", 4)),
])
def test_rows_name_the_schedules(text: str, want: tuple[str, int]) -> None:
    assert rt.schedule(text, 8, 1) == want


def test_the_planner_offers_zbv_where_the_framework_runs_it() -> None:
    """torchtitan (fsdp2) runs torch.distributed.pipelining's ScheduleZBVZeroBubble; Megatron's profile does not."""
    spec, hw = PRESETS["llama3-70b"], load_catalog().get("h100")
    fsdp2 = {lay.schedule for lay in candidate_layouts(spec, hw, 64, 256, framework="fsdp2")}
    megatron = {lay.schedule for lay in candidate_layouts(spec, hw, 64, 256, framework="megatron")}
    assert "zbv" in fsdp2 and "zbv" not in megatron and "interleaved" in megatron
    assert "zb-interleaved" in fsdp2 and "zb-interleaved" not in megatron  # stride's own `zero_bubble`


def test_a_zero_bubble_row_with_chunks_reads_as_interleaved_and_says_so() -> None:
    """A row that names zero bubble and gives a vpp column is read as zero bubble interleaved over those chunks,
    with a note; naming the interleaved schedule without a count tries the counts, as interleaved rows do."""
    from stride.perfmodel.hardware import load_catalog as catalog
    from stride.perfmodel.published import row_inputs

    row = {"row_id": "x", "model": "llama", "arch": "Llama, RMSNorm, SwiGLU, RoPE", "params_b": "8", "layers": "32",
           "hidden": "4096", "heads": "32", "kv_heads": "8", "ffn_hidden": "14336", "vocab": "128256",
           "seq_len": "4096", "global_batch_seqs": "64", "micro_batch": "1", "gpu": "H100 SXM", "num_gpus": "8",
           "tp": "1", "pp": "8", "pp_schedule": "zero bubble", "vpp": "2", "precision": "bf16",
           "framework": "torchtitan", "meas_tokens_per_s_per_gpu": "1000"}
    ri = row_inputs(row, catalog())
    assert (ri.layout.schedule, ri.layout.vpp) == ("zb-interleaved", 2)
    assert any("read as zero bubble interleaved over 2 chunks" in n for n in ri.notes)
    ri = row_inputs({**row, "pp_schedule": "ScheduleInterleavedZeroBubble", "vpp": ""}, catalog())
    assert ri.layout.schedule == "zb-interleaved" and ri.vpp_choices == (2, 4)
