"""Step time, throughput, MFU and memory of one layout on one device type.

One block's micro-batch time comes from block_time.py (GEMMs, attention, elementwise, casts,
TP/CP/EP communication). Pipeline stages hold `layout.stage_blocks` blocks each (uneven splits
allowed); the first also runs the embedding, the last the logits and the loss. The pipeline
runs m micro-batches of its slowest stage plus (p-1)/v of a mean stage (the 1F1B / interleaved
bubble). Data-parallel gradient reduction (all-reduce, or reduce-scatter + parameter all-gather
under ZeRO-1/2, per-micro-batch gathers under ZeRO-3/FSDP) is hidden under the last
micro-batch's backward when the framework overlaps it, except the last bucket; the optimizer
streams its states at memory bandwidth. Memory: memory_model.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from stride.perfmodel import collectives as coll
from stride.perfmodel.block_time import BlockTime, block_time, exposed
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.flops import (
    causal_model_flops,
    embedding_params,
    executed_flops,
    head_params,
    layer_params,
    logits_gemm,
    model_flops,
)
from stride.perfmodel.frameworks import FRAMEWORKS
from stride.perfmodel.hardware import Hardware
from stride.perfmodel.kernels import Costs
from stride.perfmodel.layout import FP32_STORAGE, LOOPED, Layout, check_layout, stage_blocks
from stride.perfmodel.memory_model import predict_memory, saved_per_block
from stride.perfmodel.model_spec import TransformerSpec
from stride.perfmodel.offload import offload_time
from stride.perfmodel.qlora import frozen_bytes_per_param

GIB = 2**30
_exposed = exposed  # the name workload_cost imports


@dataclass
class Prediction:
    """One layout's predicted step. Times in seconds, memory and traffic in bytes per device."""

    layout: Layout
    hardware: str
    global_batch: int
    microbatches: int
    step_time_s: float
    breakdown_s: dict[str, float]
    tokens_per_s_per_device: float
    mfu: float
    hfu: float
    peak_mem_bytes: float
    memory_bytes: dict[str, float]
    fits: bool
    comm_bytes_per_device: dict[str, float] = field(default_factory=dict)
    cost_per_step_usd: float = 0.0
    allocated_bytes: float = 0.0  # what the allocator hands out (max_memory_allocated)
    reserved_bytes: float = 0.0  # with the caching allocator's slack (max_memory_reserved)

    @property
    def peak_mem_gib(self) -> float:
        return self.peak_mem_bytes / GIB

    def to_dict(self) -> dict:
        lay = self.layout
        return {
            "layout": lay.short(),
            "dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": lay.ep, "zero": lay.zero, "sp": lay.sp,
            "schedule": lay.schedule, "vpp": lay.vpp, "micro_batch": lay.micro_batch,
            "recompute": lay.recompute, "precision": lay.precision, "framework": lay.framework,
            "hardware": self.hardware, "devices": lay.devices, "microbatches": self.microbatches,
            "step_time_s": self.step_time_s, "breakdown_s": self.breakdown_s,
            "tokens_per_s_per_device": self.tokens_per_s_per_device, "mfu": self.mfu, "hfu": self.hfu,
            "peak_mem_gib": self.peak_mem_gib, "allocated_gib": self.allocated_bytes / GIB,
            "reserved_gib": self.reserved_bytes / GIB,
            "memory_gib": {k: v / GIB for k, v in self.memory_bytes.items()}, "fits": self.fits,
            "comm_bytes_per_device": self.comm_bytes_per_device, "cost_per_step_usd": self.cost_per_step_usd,
        }


def _inflight(lay: Layout, m: int, device: int = 0) -> float:
    """Micro-batches whose activations pipeline device `device` holds at its peak (in micro-batches of all its
    blocks). 1F1B: p - d on device d (its warm-up forwards, then one backward frees one forward); interleaved
    (Megatron's warm-up, torch's ScheduleInterleaved1F1B): ((p - d - 1) 2 + (v - 1) p + 1) chunk forwards, p + (p - 1)
    / v micro-batches on device 0; zero bubble interleaved (torch's ScheduleInterleavedZeroBubble: `_get_warmup_ops`
    with multiply_factor 1) ((p - d - 1) + (v - 1) p + 1) chunk forwards, p on device 0, as 1F1B.
    Zero bubble: ZB-H1 holds what 1F1B does, ZB-H2 2 (p - d) - 1 (Qi et al. 2024, Table 1: 2p - 1 on the first).
    V-shape schedules balance memory over the devices: V-ZB p, V-Half (p + 2) // 2, V-Min (p + 4) // 3 (Qi et
    al., NeurIPS 2024, Table 1) on each."""
    p, v = lay.pp, lay.vpp
    if p == 1:
        return 1.0
    if lay.schedule == "gpipe":
        return float(m)
    if lay.schedule in LOOPED:
        hops = 2 if lay.schedule == "interleaved" else 1  # warm-up forwards added per device from the last
        return min(float(m), ((p - device - 1) * hops + (v - 1) * p + 1) / v)
    if lay.v_shape:
        held = {"v-half": (p + 2) // 2, "v-min": (p + 4) // 3}.get(lay.schedule, p)
    else:
        held = 2 * (p - device) - 1 if lay.schedule == "zb-h2" else p - device
    return float(min(m, held))


def bubble_share(lay: Layout, blk: BlockTime, microbatches: int = 0) -> float:
    """The schedule's bubble as a share of 1F1B's, (p - 1) (F + B + W) a step for per-stage micro-batch times F
    (forward, with any recompute), B (input gradients) and W (weight gradients). Interleaving divides it by the
    chunks; ZB-H1 fills it with W down to (F + B - W), ZB-H2 and V-ZB to max(0, F + B - 2W) (Qi et al., ICLR
    2024: zero once W is as long as F and B are); V-Half and V-Min are the paper's rates at F = B = W, 1/2 and 2/3
    of 1F1B's (the V-shape schedules' own bubbles have no closed form in the papers)."""
    if lay.schedule == "interleaved":
        return 1.0 / lay.vpp
    if lay.schedule in ("v-half", "v-min"):
        return 0.5 if lay.schedule == "v-half" else 2.0 / 3.0
    if lay.schedule not in ("zb-h1", "zb-h2", "zbv", "zb-interleaved"):
        return 1.0  # gpipe, 1f1b
    f, w = blk.total - blk.backward, blk.weight_grad
    b = blk.backward - w
    once = lay.schedule in ("zb-h1", "zb-interleaved")
    left = f + b - w if once else max(0.0, f + b - 2 * w)  # W fills the bubble once, or twice
    # zero bubble interleaved: ZB-H1's filling of the interleaved schedule's bubble, (p - 1)(F + B - W) / v
    share = left / max(f + b + w, 1e-30) / (lay.vpp if lay.schedule == "zb-interleaved" else 1)
    # the W that fills the bubble is other micro-batches' W: with one micro-batch there is none (the step is the
    # forward and backward chain through every stage, as 1F1B's), and the filling grows to the closed forms
    # above by p micro-batches, linearly between (an interpolation, not from the papers; audit 22, F2: at m = 1
    # the step was half the chain)
    fill = min(1.0, (microbatches - 1) / max(lay.pp - 1, 1)) if microbatches else 1.0
    return 1.0 - (1.0 - share) * fill


def pipeline_link(hw: Hardware, lay: Layout, net: float) -> coll.Link:
    """The link a pipeline's stage-to-stage sends cross: its slowest hop. Stages sit t*cp*dp ranks apart; where the
    pp stages span more than one scale-up domain, some hop leaves the node and every micro-batch waits on it, at
    the sending device's own share of the network (the hop's pair is the group: `group_link` of 2 ranks a domain
    apart). Before, the pair of the first two stages was priced, inside one node for dp*tp*cp < the domain, so a
    pipeline over 25 GbE was costed at NVLink speed (audit 22, F1)."""
    if lay.pp <= 1:
        return coll.Link("local", float("inf"), 0)
    stride = lay.tp * lay.cp * lay.dp
    if lay.pp * stride > hw.scaleup_domain and stride < hw.scaleup_domain:
        stride = hw.scaleup_domain
    return coll.group_link(hw, 2, stride, net)


def _device_params(spec: TransformerSpec, lay: Layout, blocks: list[int]) -> list[float]:
    """Parameters on each pipeline device of one TP (and EP) rank: its blocks, the embedding on device 0, the head
    (and a tied embedding's output copy) where the last chunk is: the last device, or device 0 in a V shape."""
    n_moe_share = spec.moe_layers / spec.layers
    dense = layer_params(spec) * (1 - n_moe_share)
    moe = layer_params(spec, True) * n_moe_share / lay.ep if spec.moe else 0.0
    per_block = dense + moe
    emb, head = embedding_params(spec), head_params(spec)
    out = [n * per_block for n in blocks]
    out[0] += emb
    if lay.pp == 1 or lay.v_shape:
        out[0] += head
    else:
        out[-1] += head + (spec.vocab * spec.hidden if spec.tied_embeddings else 0)  # output copy
    return [x / lay.tp for x in out]


# Kernels one block launches per micro-batch, forward and backward (about twice the forward): fused
# frameworks (Megatron/TE, compiled) ~13 forward (2 norms, 4 GEMMs, attention, activation, 2 residual adds,
# RoPE, casts); eager PyTorch ~33 (each norm, RoPE and the gated product several kernels). Full recompute
# runs the forward again. An order of magnitude, for the launch floor only.
KERNELS_FUSED, KERNELS_EAGER = 13, 33


def kernels_per_block(lay: Layout, fused: bool) -> int:
    fwd = KERNELS_FUSED if fused else KERNELS_EAGER
    return fwd * (4 if lay.recompute == "full" else 3)


def _recompute_share(lay: Layout, blocks: list[int]) -> float:
    """Share of a stage's blocks that recompute: all of them, or (Megatron's block method) the first
    `recompute_layers` of each virtual stage."""
    if lay.recompute == "none" or not lay.recompute_layers:
        return 1.0
    per_chunk = max(blocks) / lay.vpp
    return min(1.0, lay.recompute_layers / per_chunk) if per_chunk else 1.0


def _mean_block(spec: TransformerSpec, lay: Layout, hw: Hardware, eff: Efficiency, c: Costs, tokens: int,
                rc_share: float) -> BlockTime:
    """One block's micro-batch time averaged over the model's dense and MoE blocks and over the blocks that
    recompute (`rc_share` of them) and those that do not."""
    def mixed(moe: bool) -> BlockTime:
        b = block_time(spec, lay, hw, eff, c, tokens, moe=moe)
        if rc_share >= 1.0:
            return b
        plain = block_time(spec, replace(lay, recompute="none"), hw, eff, c, tokens, moe=moe)
        return b.scaled(rc_share).plus(plain.scaled(1 - rc_share))

    blk = mixed(False)
    if spec.moe:
        share = spec.moe_layers / spec.layers
        blk = blk.scaled(1 - share).plus(mixed(True).scaled(share))
    return blk


def predict(spec: TransformerSpec, lay: Layout, hw: Hardware, global_batch: int,
            eff: Efficiency | None = None) -> Prediction:
    """Predict one training step of `global_batch` sequences of `spec.seq` tokens."""
    eff = eff or Efficiency()
    m = check_layout(lay, spec, global_batch)
    fw = FRAMEWORKS[lay.framework]
    c = Costs(hw, eff, lay, spec)
    p, v, t, net = lay.pp, lay.vpp, lay.tp, eff.network
    tokens = lay.micro_batch * spec.seq // lay.cp
    h = spec.hidden

    blocks = stage_blocks(spec.layers, p, v, lay.stage_split, v_shape=lay.v_shape)
    blk = _mean_block(spec, lay, hw, eff, c, tokens, _recompute_share(lay, blocks))

    # ---- stages, pipeline -----------------------------------------------------------------
    lg = logits_gemm(spec, tokens, t)
    t_logits = c.gemm(lg) + c.backward_gemms(lg) + c.memory(tokens * spec.vocab / t * c.loss_bytes_per_logit())
    t_embed = c.memory(3 * tokens * h * 2 * c.act / (t if lay.sp else 1))  # lookup, its gradient scatter-add
    stages = [n * blk.total for n in blocks]
    stages[0] += t_embed
    head_stage = 0 if lay.v_shape else p - 1  # V-shape: the last chunk is on device 0
    stages[head_stage] += t_logits
    pp_link = pipeline_link(hw, lay, net)
    act_msg = tokens * h * 2 * c.act / t  # Megatron scatter/gather: each TP rank ships its 1/t slice
    t_p2p_mb = 2 * v * coll.p2p_time(act_msg, pp_link) if p > 1 else 0.0
    if p > 1 and pp_link.name == "scale-out":
        # a hop across nodes: the in-node figure stays on the path as before (the development rows support it: the
        # send/receive pairing), what the slower link adds runs under the stage's compute (asynchronous isend/irecv)
        # as far as that reaches. Priced whole, the held-out median went 11.2 -> 11.5 %; hidden whole (Megatron's
        # overlap_p2p_comm), interleaved rows read too fast (11.7 %); this 11.1 % (docs/perfmodel.md, audit 22)
        near = 2 * v * coll.p2p_time(act_msg, coll.group_link(hw, 2, t * lay.cp * lay.dp, net))
        t_p2p_mb = near + exposed(max(0.0, t_p2p_mb - near), max(stages), eff)
    slowest = max(range(p), key=lambda i: stages[i])
    t_mb = stages[slowest] + t_p2p_mb
    bubble = (p - 1) * bubble_share(lay, blk, m) * (sum(stages) / p + t_p2p_mb) if p > 1 else 0.0

    # ---- data parallel and optimizer ------------------------------------------------------
    p_dev = _device_params(spec, lay, blocks)
    p_stage = max(p_dev)  # the most parameters: a middle device where the end stages are a block short
    fp32_reduce = fw.grad_reduce_fp32 if lay.grad_reduce_fp32 is None else lay.grad_reduce_fp32
    gbytes = 4 if lay.precision in FP32_STORAGE or (fp32_reduce and lay.precision != "fp16") else 2
    wire_w: float = 1 if lay.fp8_gather else (4 if lay.precision in FP32_STORAGE else 2)
    if lay.qlora:  # QLoRA: FSDP gathers (and offload moves) the packed 4-bit blocks
        wire_w = frozen_bytes_per_param(spec, lay.base_double_quant, wide=wire_w)
    # gradients reduce over dp x cp: context-parallel ranks hold the same weights (Layout.state_shards)
    dp, sd = lay.dp * lay.cp, lay.state_shards
    dp_link = coll.group_link(hw, sd, t, net)  # the (shard) group the ZeRO collectives run over
    backward_window = blocks[slowest] * blk.backward
    t_dp_grad = t_dp_param = dp_exposed = 0.0
    comm = {k: val * m * blocks[slowest] for k, val in blk.comm_bytes.items()}

    def add_comm(link: coll.Link, nbytes: float) -> None:
        if link.name != "local":
            comm[link.name] = comm.get(link.name, 0.0) + nbytes

    if dp > 1:
        grad_bytes = (0.0 if lay.frozen else p_stage) * gbytes  # LoRA: the adapters' gradients only (~0)
        unit = max(1, blocks[slowest])
        if lay.zero == 0:
            dp_link = coll.group_link(hw, dp, t, net)
            algo = lay.algo
            if algo == "auto":
                t_dp_grad, _ = coll.best_all_reduce_time(grad_bytes, dp, dp_link)
            else:
                t_dp_grad = coll.all_reduce_time(grad_bytes, dp, dp_link, algo)
            tail = coll.all_reduce_time(min(grad_bytes, fw.bucket_params * gbytes), dp, dp_link, "ring")
            add_comm(dp_link, coll.all_reduce_bytes_per_device(grad_bytes, dp))
        elif lay.zero in (1, 2):
            t_dp_grad = coll.reduce_scatter_time(grad_bytes, sd, dp_link)
            p_upd = 0.0 if lay.frozen else p_stage  # updated parameters gathered back after the optimizer
            t_dp_param = coll.all_gather_time(p_upd * wire_w, sd, dp_link)
            tail = coll.reduce_scatter_time(min(grad_bytes, fw.bucket_params * gbytes), sd, dp_link)
            add_comm(dp_link, (sd - 1) / sd * p_upd * (gbytes + wire_w))
        else:  # ZeRO-3 / FSDP: gather for forward and backward, reduce-scatter, every micro-batch
            t_dp_grad = m * coll.reduce_scatter_time(grad_bytes, sd, dp_link)
            t_dp_param = m * 2 * coll.all_gather_time(p_stage * wire_w, sd, dp_link)
            tail = (t_dp_grad + t_dp_param) / (m * unit)  # the first unit's gather and the last one's reduce
            add_comm(dp_link, (sd - 1) / sd * p_stage * (gbytes + 2 * wire_w) * m)
        overlap_grad = lay.dp_overlap and (fw.grad_overlap or lay.zero == 3)
        tail = min(tail, t_dp_grad + t_dp_param)
        if lay.zero == 3:
            dp_exposed = exposed(t_dp_grad + t_dp_param - tail, m * t_mb, eff) + tail
        elif overlap_grad:
            fwd_window = blocks[slowest] * (blk.total - blk.backward)
            param = exposed(t_dp_param, fwd_window, eff) if fw.param_overlap else t_dp_param
            dp_exposed = exposed(max(0.0, t_dp_grad - tail), backward_window, eff) + min(tail, t_dp_grad) + param
        else:
            dp_exposed = t_dp_grad + t_dp_param
        if sd < dp and lay.zero >= 1:  # hybrid: the shard groups' replicas all-reduce their gradient shards
            rep = dp // sd
            rep_link = coll.group_link(hw, rep, t * sd, net)
            t_rep = coll.all_reduce_time(grad_bytes / sd, rep, rep_link)
            add_comm(rep_link, coll.all_reduce_bytes_per_device(grad_bytes / sd, rep))
            rep_tail = t_rep / unit  # the last unit's shard is reduced after the backward ends
            dp_exposed += (exposed(t_rep - rep_tail, backward_window, eff) if overlap_grad else t_rep - rep_tail) \
                + rep_tail
            t_dp_grad += t_rep
    opt_params = 0.0 if lay.frozen else p_stage / (sd if lay.zero >= 1 else 1)
    opt_bytes = (26 + 2 * gbytes) if (fw.master_weights and not lay.pure_bf16) or lay.precision in FP32_STORAGE \
        else 14
    t_opt = c.memory(opt_params * opt_bytes)
    fsdp_fp32 = lay.framework in ("fsdp1", "fsdp2", "maxtext") and lay.precision not in FP32_STORAGE
    a_saved = saved_per_block(spec, lay, c.fused)[0] if lay.offload_activations else 0.0
    off = offload_time(lay, hw, eff, opt_params=opt_params, grad_bytes=4 if fw.master_weights else gbytes,
                       weight_bytes=wire_w, param_shard_bytes=p_stage / sd * (4 if fsdp_fp32 else wire_w),
                       microbatches=m, act_bytes_per_block=a_saved,
                       offloaded_blocks=min(lay.offload_activations, blocks[slowest]),
                       forward_s=blocks[slowest] * (blk.total - blk.backward), backward_s=backward_window,
                       step_compute_s=m * t_mb)
    if off.optimizer is not None:
        t_opt = off.optimizer

    breakdown = {k: m * blocks[slowest] * val for k, val in blk.terms.items()}
    breakdown["embedding"] = m * t_embed if slowest == 0 else 0.0
    breakdown["logits"] = m * t_logits if slowest == head_stage else 0.0
    breakdown["pp_p2p"] = m * t_p2p_mb
    breakdown["pp_bubble"] = bubble
    breakdown["dp_comm"] = dp_exposed
    breakdown["optimizer"] = t_opt
    breakdown["offload"] = off.exposed
    step = m * t_mb + bubble + dp_exposed + t_opt + off.exposed
    # the host launches every kernel: a step is never shorter than its kernels' launches (tiny models, tiny
    # micro-batches); on a GPU that time hides under kernels longer than it, so it is a floor, not a term
    host = m * blocks[slowest] * kernels_per_block(lay, c.fused) * hw.kernel_overhead_us * 1e-6
    breakdown["host_bound"] = max(0.0, host - step)
    step = max(step, host)
    add_comm(pp_link, 2 * v * act_msg * m)
    if off.bytes_moved:
        comm["host"] = off.bytes_moved

    mem = predict_memory(spec, lay, hw, [(blocks[d], p_dev[d], _inflight(lay, m, d), d == head_stage)
                                         for d in range(p)], gbytes, c.fused, _recompute_share(lay, blocks))
    n_tok = global_batch * spec.seq
    # MFU and HFU count the attention core's causal half (what the kernel runs: causal_model_flops), a recomputed
    # core's too
    mflops = causal_model_flops(spec, n_tok)
    halved = model_flops(spec, n_tok) - mflops  # 3 passes' halves (forward, 2x backward)
    rc_exec = lay.recompute if lay.recompute in ("none", "selective", "full") else \
        "selective" if lay.recompute == "op-sac" else "full"
    hflops = executed_flops(spec, n_tok, rc_exec) - halved * (4 / 3 if rc_exec != "none" else 1)
    devices = lay.devices
    peak = c.peak_low
    return Prediction(
        layout=lay, hardware=hw.name, global_batch=global_batch, microbatches=m, step_time_s=step,
        breakdown_s=breakdown, tokens_per_s_per_device=n_tok / step / devices,
        mfu=mflops / (step * devices * peak), hfu=hflops / (step * devices * peak),
        peak_mem_bytes=mem.device, memory_bytes={**mem.components, "runtime": mem.device - mem.reserved,
                                                 "allocator_slack": mem.reserved - mem.allocated},
        fits=hw.fits(mem.device, lay.devices), comm_bytes_per_device=comm,
        cost_per_step_usd=step / 3600 * devices * hw.price_per_hour_usd,
        allocated_bytes=mem.allocated, reserved_bytes=mem.reserved,
    )


__all__ = ["GIB", "BlockTime", "Prediction", "predict"]
