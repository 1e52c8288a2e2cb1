"""Step time, throughput, MFU and memory of one layout on one device type.

Time per micro-batch per block is the sum of its kernels on one device:
- GEMMs: a summed roofline per matmul, FLOPs / (peak * gemm efficiency) + bytes / (memory bw *
  memory efficiency), so skinny shapes (small hidden/tp, few tokens) lose throughput smoothly;
  backward is two GEMMs of the forward's size; flash attention runs the causal half of the
  score square and re-runs it in backward (2.5x forward);
- elementwise kernels (norms, residual/dropout, activation, materialised softmax, loss) at
  memory bandwidth, replicated over TP ranks unless sequence parallel shards them;
- tensor-parallel collectives (all-reduce, or all-gather + reduce-scatter with SP), exposed
  unless `tp_overlap`; context-parallel K/V exchange, hidden under attention;
- recompute re-runs the forward (full) or the attention core (selective) in backward.
The pipeline runs (m + (p-1)/v) micro-batch slots of the slowest stage; data-parallel
gradient reduction (all-reduce, or reduce-scatter + all-gather under ZeRO) overlaps the last
micro-batch's backward when `dp_overlap`; the optimizer streams its states at memory bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stride.perfmodel import collectives as coll
from stride.perfmodel.activations import layer_activation_bytes
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.flops import (
    ATTENTION_CORE,
    Gemm,
    embedding_params,
    executed_flops,
    head_params,
    layer_gemms,
    layer_params,
    logits_gemm,
    model_flops,
)
from stride.perfmodel.hardware import Hardware
from stride.perfmodel.layout import Layout, check_layout
from stride.perfmodel.model_spec import TransformerSpec

GIB = 2**30
# Bytes moved per logit by an unfused fp32 cross-entropy (Megatron's vocab_parallel_cross_entropy
# on `logits.float()`): cast 2r+4w, max 4r, subtract 4r+4w, exp 4r+4w, sum 4r, divide 4r+4w,
# backward scale 4r+4w, cast of the gradient 4r+2w.
CE_BYTES_PER_LOGIT = 52


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

    @property
    def peak_mem_gib(self) -> float:
        return self.peak_mem_bytes / GIB

    def to_dict(self) -> dict:
        lay = self.layout
        return {
            "layout": lay.short(),
            "dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "zero": lay.zero, "sp": lay.sp,
            "schedule": lay.schedule, "vpp": lay.vpp, "micro_batch": lay.micro_batch,
            "recompute": lay.recompute, "precision": lay.precision,
            "hardware": self.hardware, "devices": lay.devices, "microbatches": self.microbatches,
            "step_time_s": self.step_time_s, "breakdown_s": self.breakdown_s,
            "tokens_per_s_per_device": self.tokens_per_s_per_device, "mfu": self.mfu, "hfu": self.hfu,
            "peak_mem_gib": self.peak_mem_gib,
            "memory_gib": {k: v / GIB for k, v in self.memory_bytes.items()}, "fits": self.fits,
            "comm_bytes_per_device": self.comm_bytes_per_device, "cost_per_step_usd": self.cost_per_step_usd,
        }


def _exposed(t_comm: float, window: float, eff: Efficiency) -> float:
    """Communication left on the critical path when it runs under `window` seconds of compute."""
    hidden = min(t_comm, window)
    return (t_comm - hidden) + (1.0 - eff.overlap) * hidden


class _Costs:
    """Per-kernel cost helpers bound to one device type and efficiency set."""

    def __init__(self, hw: Hardware, eff: Efficiency, precision: str):
        self.hw, self.eff = hw, eff
        self.peak_linear = hw.peak_flops(precision)  # a clear error where the device lacks it
        self.peak_attn = hw.peak_flops("fp32" if precision == "fp32" else "bf16")  # attention stays 16-bit
        self.gemm_eff = hw.matmul_efficiency or eff.gemm
        self.attn_eff = hw.attention_efficiency or eff.attention
        self.mem_bw = hw.memory_bw * eff.memory
        self.in_bytes = {"fp8": 1, "fp32": 4}.get(precision, 2)
        self.act = 2 if precision == "fp32" else 1  # fp32 activations: twice the 16-bit bytes

    def gemm(self, g: Gemm, peak: float | None = None) -> float:
        nbytes = g.batch * (self.in_bytes * (g.m * g.k + g.k * g.n) + 2 * self.act * g.m * g.n)
        return g.flops / ((peak or self.peak_linear) * self.gemm_eff) + nbytes / self.mem_bw

    def backward_gemms(self, g: Gemm) -> float:
        """Backward of one forward GEMM: two GEMMs of its size (dgrad and wgrad)."""
        return 2 * self.gemm(g)

    def memory(self, nbytes: float) -> float:
        return nbytes / self.mem_bw


def _stage_params(spec: TransformerSpec, lay: Layout) -> tuple[float, float]:
    """Parameters on the first and the last pipeline stage of one TP rank."""
    body = spec.layers / lay.pp * layer_params(spec)
    emb, head = embedding_params(spec), head_params(spec)
    if lay.pp == 1:
        p = (body + emb + head) / lay.tp
        return p, p
    last_head = head + (spec.vocab * spec.hidden if spec.tied_embeddings else 0)  # output copy
    return (body + emb) / lay.tp, (body + last_head) / lay.tp


def _inflight(lay: Layout, m: int) -> float:
    """Micro-batches whose activations the first stage holds at its peak."""
    p, v = lay.pp, lay.vpp
    if p == 1:
        return 1.0
    if lay.schedule == "gpipe":
        return float(m)
    if lay.schedule == "interleaved":
        return min(float(m), p * (1 + (p - 1) / (p * v)))
    return float(min(m, p))


def predict(spec: TransformerSpec, lay: Layout, hw: Hardware, global_batch: int,
            eff: Efficiency | None = None) -> Prediction:
    """Predict one training step of `global_batch` sequences of `spec.seq` tokens."""
    eff = eff or Efficiency()
    m = check_layout(lay, spec, global_batch)
    c = _Costs(hw, eff, lay.precision)
    net = eff.network
    b, t, p, v = lay.micro_batch, lay.tp, lay.pp, lay.vpp
    s_local = spec.seq // lay.cp
    tokens = b * s_local
    h = spec.hidden
    flash = lay.attention == "flash"
    comm: dict[str, float] = {}

    def add_comm(link: coll.Link, nbytes: float, times: float = 1.0) -> None:
        if link.name != "local":
            comm[link.name] = comm.get(link.name, 0.0) + nbytes * times

    # ---- one block, one micro-batch: compute ------------------------------------------------
    gemms = layer_gemms(spec, tokens, t, lay.cp)
    lin = [g for g in gemms if g.name not in ATTENTION_CORE]
    core = [g for g in gemms if g.name in ATTENTION_CORE]
    t_lin_f = sum(c.gemm(g) for g in lin)
    if flash:  # causal half of the square, no s x s traffic; backward re-runs the scores
        t_core_f = sum(g.flops for g in core) * 0.5 / (c.peak_attn * c.attn_eff)
        t_core_b = 2.5 * t_core_f
    else:
        t_core_f = sum(c.gemm(g, c.peak_attn) for g in core)
        t_core_b = 2.0 * t_core_f
    shard = t if lay.sp else 1
    f = spec.ffn
    drop = 1 if spec.dropout else 0
    ew_tok = (8 * h + (14 if drop else 12) * h) / shard + (6 * f if spec.act == "swiglu" else 4 * f) / t
    softmax_tok = 0.0 if flash else (4 + 5 * drop) * (spec.heads / t) * spec.seq
    t_ew_f = c.memory(tokens * ew_tok * c.act)
    t_sm_f = c.memory(tokens * softmax_tok * c.act)

    # ---- one block, one micro-batch: tensor / context parallel communication -----------------
    tp_link = coll.group_link(hw, t, 1, net)
    msg = tokens * h * 2 * c.act
    if t > 1 and lay.sp:
        t_tp_f = 2 * (coll.all_gather_time(msg, t, tp_link) + coll.reduce_scatter_time(msg, t, tp_link))
        tp_bytes_f = 4 * (t - 1) / t * msg
    elif t > 1:
        t_tp_f = 2 * coll.all_reduce_time(msg, t, tp_link, "ring")
        tp_bytes_f = 2 * coll.all_reduce_bytes_per_device(msg, t)
    else:
        t_tp_f, tp_bytes_f = 0.0, 0.0
    t_cp = 0.0
    if lay.cp > 1:
        cp_link = coll.group_link(hw, lay.cp, t, net)
        kv = b * spec.seq * 2 * spec.kv_dim * 2 / t
        t_cp_raw = coll.all_gather_time(kv, lay.cp, cp_link) + coll.reduce_scatter_time(kv, lay.cp, cp_link)
        t_cp = _exposed(t_cp_raw, t_core_f + t_core_b, eff)
        add_comm(cp_link, 2 * (lay.cp - 1) / lay.cp * kv, spec.layers / p * m)

    n_fwd = 1 + (1 if lay.recompute == "full" else 0)
    gemm_f, gemm_b = t_lin_f, sum(c.backward_gemms(g) for g in lin)
    t_tp_layer = (n_fwd + 1) * t_tp_f
    if lay.tp_overlap:
        t_tp_layer = _exposed(t_tp_layer, (n_fwd + 2) * t_lin_f, eff)
    add_comm(tp_link, tp_bytes_f, (n_fwd + 1) * spec.layers / p * m)
    layer = {
        "gemm": n_fwd * gemm_f + gemm_b,
        "attention": t_core_f + t_core_b
        + (t_core_f if lay.recompute == "full" or (lay.recompute == "selective" and not flash) else 0.0),
        "elementwise": (n_fwd + 2) * t_ew_f + (2 + n_fwd) * t_sm_f
        + (t_sm_f if lay.recompute == "selective" else 0.0),
        "tp_comm": t_tp_layer,
        "cp_comm": t_cp,
    }
    t_layer = sum(layer.values())
    layer_bwd = gemm_b + t_core_b + 2 * t_ew_f + 2 * t_sm_f + t_tp_f

    # ---- stage and pipeline ------------------------------------------------------------------
    layers_stage = spec.layers / p
    pp_link = coll.group_link(hw, 2, t * lay.cp * lay.dp, net) if p > 1 else coll.Link("local", float("inf"), 0)
    act_msg = tokens * h * 2 * c.act / t  # Megatron scatter/gather: each TP rank ships its 1/t slice
    t_p2p_mb = 2 * v * coll.p2p_time(act_msg, pp_link) if p > 1 else 0.0
    add_comm(pp_link, 2 * v * act_msg, m)
    lg = logits_gemm(spec, tokens, t)
    t_logits = c.gemm(lg) + c.backward_gemms(lg) + c.memory(tokens * spec.vocab / t * CE_BYTES_PER_LOGIT)
    t_body = layers_stage * t_layer
    t_mb = t_body + t_p2p_mb + t_logits
    bubble = (p - 1) / v * (t_body + t_p2p_mb) if p > 1 else 0.0

    # ---- data parallel and optimizer ---------------------------------------------------------
    p_first, p_last = _stage_params(spec, lay)
    p_stage = max(p_first, p_last)
    gbytes = 2 if lay.precision == "fp16" else 4
    dp = lay.dp
    dp_link = coll.group_link(hw, dp, t * lay.cp, net)
    algo = lay.algo
    t_dp_grad = t_dp_param = 0.0
    if dp > 1:
        if lay.zero == 0:
            if algo == "auto":
                t_dp_grad, _ = coll.best_all_reduce_time(p_stage * gbytes, dp, dp_link)
            else:
                t_dp_grad = coll.all_reduce_time(p_stage * gbytes, dp, dp_link, algo)
            add_comm(dp_link, coll.all_reduce_bytes_per_device(p_stage * gbytes, dp))
        elif lay.zero in (1, 2):
            t_dp_grad = coll.reduce_scatter_time(p_stage * gbytes, dp, dp_link)
            t_dp_param = coll.all_gather_time(p_stage * 2, dp, dp_link)
            add_comm(dp_link, (dp - 1) / dp * p_stage * (gbytes + 2))
        else:  # ZeRO-3 / FSDP: gather for forward and backward, reduce-scatter, every micro-batch
            t_dp_grad = m * coll.reduce_scatter_time(p_stage * gbytes, dp, dp_link)
            t_dp_param = m * 2 * coll.all_gather_time(p_stage * 2, dp, dp_link)
            add_comm(dp_link, (dp - 1) / dp * p_stage * (gbytes + 4), m)
    if lay.zero == 3:
        dp_exposed = _exposed(t_dp_grad + t_dp_param, m * t_mb, eff)
    elif lay.dp_overlap:
        dp_exposed = (_exposed(t_dp_grad, layers_stage * layer_bwd, eff)
                      + _exposed(t_dp_param, layers_stage * (t_layer - layer_bwd), eff))
    else:
        dp_exposed = t_dp_grad + t_dp_param
    opt_params = p_stage / (dp if lay.zero >= 1 else 1)
    t_opt = c.memory(opt_params * (26 + 2 * gbytes))

    breakdown = {k: m * layers_stage * val for k, val in layer.items()}
    breakdown["logits"] = m * t_logits
    breakdown["pp_p2p"] = m * t_p2p_mb
    breakdown["pp_bubble"] = bubble
    breakdown["dp_comm"] = dp_exposed
    breakdown["optimizer"] = t_opt
    step = m * t_mb + bubble + dp_exposed + t_opt

    # ---- memory ------------------------------------------------------------------------------
    memory = _memory(spec, lay, hw, m, p_first, p_last, gbytes)
    peak = sum(memory.values())

    n_tok = global_batch * spec.seq
    peak_flops = c.peak_linear
    mflops = model_flops(spec, n_tok)
    hflops = executed_flops(spec, n_tok, lay.recompute)
    devices = lay.devices
    return Prediction(
        layout=lay, hardware=hw.name, global_batch=global_batch, microbatches=m, step_time_s=step,
        breakdown_s=breakdown, tokens_per_s_per_device=n_tok / step / devices,
        mfu=mflops / (step * devices * peak_flops), hfu=hflops / (step * devices * peak_flops),
        peak_mem_bytes=peak, memory_bytes=memory, fits=peak <= hw.memory_bytes,
        comm_bytes_per_device=comm, cost_per_step_usd=step / 3600 * devices * hw.price_per_hour_usd,
    )


def _memory(spec: TransformerSpec, lay: Layout, hw: Hardware, m: int, p_first: float, p_last: float,
            gbytes: int) -> dict[str, float]:
    """Peak bytes on the worse of the first stage (most in-flight activations) and the last (logits)."""
    dp = lay.dp
    # fp32 master + Adam m, v (+ fp32 grad copy for fp16); fp32 training has no master copy
    opt_bytes = {"fp16": 16, "fp32": 8}.get(lay.precision, 12)
    wbytes = 4 if lay.precision == "fp32" else 2
    act = 2 if lay.precision == "fp32" else 1
    tokens = lay.micro_batch * spec.seq / lay.cp
    flash = lay.attention == "flash"
    layers_stage = spec.layers / lay.pp
    a_layer = act * layer_activation_bytes(spec, lay.micro_batch, lay.tp, lay.sp, lay.cp, lay.recompute, flash)
    a_full = act * layer_activation_bytes(spec, lay.micro_batch, lay.tp, lay.sp, lay.cp, "none", flash)
    grad_ws = 2 * tokens * (spec.ffn * (2 if spec.act == "swiglu" else 1)) / lay.tp * 2  # backward scratch
    logits = tokens * spec.vocab / lay.tp * 10  # bf16 logits + fp32 softmax and its gradient

    def stage(params: float, inflight: float, with_logits: bool) -> dict[str, float]:
        acts = inflight * layers_stage * a_layer + (a_full if lay.recompute == "full" else 0.0)
        buffers = grad_ws + (logits if with_logits else 0.0)
        if lay.zero == 3:
            buffers += 2 * layer_params(spec) / lay.tp * (2 + gbytes)  # prefetched unsharded block
        return {
            "params": wbytes * params / (dp if lay.zero == 3 else 1),
            "grads": gbytes * params / (dp if lay.zero >= 2 else 1),
            "optimizer": opt_bytes * params / (dp if lay.zero >= 1 else 1),
            "activations": acts,
            "buffers": buffers,
            "runtime": hw.runtime_overhead_gib * GIB,
        }

    first = stage(p_first, _inflight(lay, m), lay.pp == 1)
    if lay.pp == 1:
        return first
    last = stage(p_last, 1.0, True)
    return first if sum(first.values()) >= sum(last.values()) else last
