"""Time of one transformer block for one micro-batch on one device, term by term.

- GEMMs: the block's matmuls (kernels.Costs.gemm); backward = dgrad + wgrad; recompute re-runs
  the forward GEMMs its mode names (layout.RECOMPUTED_GEMMS).
- attention core: flash runs the causal half of the score square at the published throughput of
  the run's kernel on this part (attention_kernels.py), backward at its own (2.5x forward FLOPs);
  sliding-window blocks only their window's band of it (TransformerSpec.window_work);
  materialised attention (pre-2023
  Megatron) runs it as batched GEMMs writing the s x s scores, plus softmax/dropout traffic: one fused kernel's, or
  in uncompiled PyTorch the op-by-op chain's (eager_score_bytes).
- elementwise: memory-bound passes (kernels.Costs.elementwise_per_token), 2x in backward.
- casts: FP8/FP4 quantisation of GEMM inputs, weights (unless cached) and output gradients.
- TP: 2 all-reduces (or all-gather + reduce-scatter with SP) forward and 2 backward, exposed
  unless `tp_overlap`; CP: Transformer Engine's K/V ring, each transfer under one step of attention
  (torchtitan / XLA: K/V all-gather + reduce-scatter under the whole core); Ulysses: four all-to-alls each way
  around the core, exposed (the ring or all-gather then spans the rest of cp); EP: the MoE
  dispatch and combine all-to-alls (2 forward, 2 backward), exposed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from stride.perfmodel import collectives as coll
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.flops import ATTENTION_CORE, Gemm, layer_gemms
from stride.perfmodel.hardware import Hardware
from stride.perfmodel.kernels import Costs
from stride.perfmodel.layout import RECOMPUTED_GEMMS, Layout
from stride.perfmodel.model_spec import TransformerSpec
from stride.perfmodel.qlora import dequant_bytes_per_use

# TE recipes cache a weight's FP8 copy across micro-batches (Megatron passes is_first_microbatch)
_TE_RECIPES = ("delayed", "current", "mxfp8", "nvfp4")


def exposed(t_comm: float, window: float, eff: Efficiency) -> float:
    """Communication left on the critical path when it runs under `window` seconds of compute."""
    hidden = min(t_comm, max(window, 0.0))
    return (t_comm - hidden) + (1.0 - eff.overlap) * hidden


# context parallelism by all-gathering K/V (torchtitan's default rotate method, XLA's context sharding); the
# others run Transformer Engine's ring (cp_ring_time)
CP_ALL_GATHER = ("fsdp2", "maxtext")


def cp_ring_time(kv_chunk: float, cp: int, link: coll.Link, core_f: float, core_b: float, recompute: bool,
                 eff: Efficiency) -> tuple[float, float]:
    """Exposed seconds and bytes sent of Transformer Engine's ring attention over `cp` ranks
    (AttnFuncWithCPAndKVP2P, NVIDIA/TransformerEngine d0067d0da
    transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py:1356-1360, forward loop
    :1698-1716, backward :2460-2495): the core runs in cp steps, and step i's compute overlaps the send/recv of
    the K/V chunk step i+1 needs, so each of the cp-1 transfers hides under ONE step of attention (core / cp),
    not under the whole core. Backward passes K/V on and returns the dK/dV partial sums: two chunks per step.
    A recomputed core repeats the forward ring."""
    n = cp - 1
    step = coll.p2p_time(kv_chunk, link)
    fwd = n * exposed(step, core_f / cp, eff)
    bwd = n * exposed(2 * step, core_b / cp, eff)
    return fwd * (2 if recompute else 1) + bwd, n * kv_chunk * (4 if recompute else 3)


def ulysses_time(spec: TransformerSpec, u: int, t: int, tokens: int, c: Costs, hw: Hardware, net: float,
                 recompute: bool, add_comm: Callable[[coll.Link, float, float], None]) -> tuple[float, float]:
    """Exposed seconds of DeepSpeed-Ulysses' all-to-alls over `u` ranks (tensor-parallel stride `t`), and the K/V
    bytes a rank then holds (what a ring over the rest of cp passes on). Before the core, q, k and v go from a split
    of the sequence to a split of the heads, each its own all-to-all; after it the output goes back; backward
    runs the same four on the gradients; a recomputed core repeats the forward ones (deepspeed/sequence/layer.py
    DistributedAttention.forward: three `_SeqAllToAll` on query, key, value, one on the context). They are not
    overlapped with compute. K/V heads fewer than `u` (GQA) are repeated to one a rank, as USP does."""
    q = tokens * spec.q_dim / t * 2 * c.act
    kv_heads = max(spec.kv_heads / t, u)
    kv = tokens * kv_heads * spec.head_dim * 2 * c.act
    sends = (2 * q, 2 * kv)  # q and the output; k and v
    one_way = sum(2 * coll.all_to_all_time(x / 2, u, hw, t, net) for x in sends)
    times = 3 if recompute else 2
    link = coll.group_link(hw, u, t, net)
    add_comm(link, (u - 1) / u * sum(sends), times)
    return times * one_way, 2 * kv


LORA_TARGETS = {"attention": ("qkv", "attn_out"), "mlp": ("mlp_in", "mlp_out", "expert_in", "expert_out"),
                "all": ("qkv", "attn_out", "mlp_in", "mlp_out", "expert_in", "expert_out")}


def lora_adapter_time(c: Costs, lin: list[Gemm], lay: Layout) -> tuple[float, float]:
    """Seconds (forward, backward) of the LoRA adapters beside the frozen linears `lin`, as NeMo runs them unfused
    (NVIDIA/NeMo nemo/collections/llm/peft/lora.py LoRALinear.forward: `linear_output + adapter_output`;
    nemo/collections/llm/peft/utils.py ParallelLinearAdapter.forward: dropout on the input ("pre"), linear_in,
    linear_out, `x * (alpha / dim)`). For a base GEMM of a inputs and b outputs per token: two 16-bit rank-r GEMMs
    forward, their dgrad and wgrad backward (the adapters train); elementwise passes at memory bandwidth: the
    dropout (read a, write a, a 1-byte mask) forward and backward, the scale (read b, write b) forward and
    backward, the add to the base output (read 2b, write b), and in backward the adapter's input gradient added to
    the base's (read 2a, write a). The rank barely matters: a rank-16 GEMM streams its a- or b-wide operand."""
    names = LORA_TARGETS.get(lay.lora_targets, ())
    fwd = bwd = 0.0
    e, r = c.in16, lay.lora_rank
    for g in lin:
        if g.name not in names:
            continue
        m, a, b = g.m * g.batch, g.k, g.n
        t_in, t_out = c.gemm(Gemm("lora_in", m, r, a), False), c.gemm(Gemm("lora_out", m, b, r), False)
        drop = (2 * e + 1) * a if lay.lora_dropout > 0 else 0.0
        fwd += t_in + t_out + c.memory(m * (drop + 2 * e * b + 3 * e * b))
        bwd += 2 * (t_in + t_out) + c.memory(m * (drop + 2 * e * b + 3 * e * a))
    return fwd, bwd


@dataclass
class BlockTime:
    terms: dict[str, float]  # seconds per micro-batch: forward + backward + recompute
    backward: float  # seconds of the backward part (the window DP gradient reduction hides under)
    comm_bytes: dict[str, float] = field(default_factory=dict)  # per micro-batch, by link level
    weight_grad: float = 0.0  # seconds of the backward's weight-gradient GEMMs (W; the rest of it is B)

    @property
    def total(self) -> float:
        return sum(self.terms.values())

    def scaled(self, k: float) -> BlockTime:
        return BlockTime({n: v * k for n, v in self.terms.items()}, self.backward * k,
                         {n: v * k for n, v in self.comm_bytes.items()}, self.weight_grad * k)

    def plus(self, other: BlockTime) -> BlockTime:
        # Insertion order, not a set's: `total` sums in this order, and a set's follows PYTHONHASHSEED, so
        # two processes would differ in the last bits.
        keys = dict.fromkeys([*self.terms, *other.terms])
        links = dict.fromkeys([*self.comm_bytes, *other.comm_bytes])
        return BlockTime({k: self.terms.get(k, 0.0) + other.terms.get(k, 0.0) for k in keys},
                         self.backward + other.backward,
                         {k: self.comm_bytes.get(k, 0.0) + other.comm_bytes.get(k, 0.0) for k in links},
                         self.weight_grad + other.weight_grad)


def op_sac_share(spec: TransformerSpec, name: str) -> float:
    """Share of a GEMM that torchtitan's per-op selective checkpointing re-runs. Its policy saves the outputs of
    matmuls, attention and reduce-scatters but only every other matmul of a block (torchtitan
    models/llama3/infra/parallelize.py `_get_custom_policy`: "Only save every other mm"); the rest of the block
    is re-run. In a block's order wq, wk, wv, wo, w1, w3, w2 (gated) that re-runs wk, wo and w3: the K share of
    the fused QKV, the output projection, half the fused gate/up; ungated (w1, w2) it re-runs w2. The routed experts
    run as `torch._grouped_mm`, which no version of the save list holds (f738a03bf llama3/infra/parallelize.py:237;
    distributed/activation_checkpoint.py `_get_default_save_ops` at b5bcd76c6): they are all re-run."""
    if name == "qkv":
        return spec.kv_dim / (spec.q_dim + 2 * spec.kv_dim)
    if name in ("attn_out", "expert_in", "expert_out"):
        return 1.0
    if name == "mlp_in":
        return 0.5 if spec.gated else 0.0
    if name == "mlp_out":
        return 0.0 if spec.gated else 1.0
    return 0.0


def eager_score_bytes(fp32: bool, dropout: int) -> tuple[float, float]:
    """Bytes per score (forward, backward) of attention written op by op in uncompiled PyTorch (HF's eager
    attention, nanoGPT's manual one): scale, mask and softmax are separate kernels, and under 16-bit autocast the
    softmax runs in fp32 (autocast's fp32 list) between two casts. 16-bit: scale 4 (read 2, write 2), mask 4, cast
    up 6, softmax 8, cast down 6 = 28 forward; backward cast 6, softmax 12 (read the output and its gradient, write
    4), cast 6, mask 4, scale 4 = 32. fp32: scale 8, mask 8, softmax 8 = 24; backward softmax 12, mask 8, scale 8 =
    28. Dropout on the probabilities: read, write and a 1-byte mask each way (5 at 16 bits, 9 at fp32). Six times
    the fused kernel's 16-bit traffic: the materialised 16-bit eager rows (FlashAttention's HF GPT-2 baseline, HF's
    BERT blogs and docs, nanoT5, GPT-2 medium on a 3090 Ti, HF Accelerate on MI250X) read 35-183% fast with the
    fused kernel's bytes, their fp32 rows 6-25% slow (blind round 32)."""
    if fp32:
        return 24 + 9 * dropout, 28 + 9 * dropout
    return 28 + 5 * dropout, 32 + 5 * dropout


def block_time(spec: TransformerSpec, lay: Layout, hw: Hardware, eff: Efficiency, c: Costs, tokens: int,
               moe: bool = False) -> BlockTime:
    t, net = lay.tp, eff.network
    flash = lay.attention == "flash"
    rc = set(RECOMPUTED_GEMMS[lay.recompute])
    early = c.fw.ac_early_stop and lay.recompute in ("full", "mlp")  # the block's last GEMM is not re-run
    if early:
        rc -= {"mlp_out", "expert_out"}
    gemms = layer_gemms(spec, tokens, t, lay.cp, moe, lay.ep)
    lin = [g for g in gemms if g.name not in ATTENTION_CORE]
    core = [g for g in gemms if g.name in ATTENTION_CORE]
    cached = lay.fp8_gather or (lay.fp8_recipe in _TE_RECIPES and lay.framework in ("megatron", "deepspeed"))
    gemm_f = sum(c.gemm(g) for g in lin)
    gemm_b = sum(c.backward_gemms(g) for g in lin)
    share = {g.name: (op_sac_share(spec, g.name) if lay.recompute == "op-sac" else 1.0) if g.name in rc else 0.0
             for g in lin}
    gemm_rc = sum(c.gemm(g) * share[g.name] for g in lin)
    casts = [c.casts(g, cached) for g in lin]
    cast_f, cast_b = sum(x[0] for x in casts), sum(x[1] for x in casts)
    cast_rc = sum(x[0] * share[g.name] for g, x in zip(lin, casts, strict=True))
    lora_f, lora_b = lora_adapter_time(c, lin, lay) if lay.frozen and lay.lora_rank else (0.0, 0.0)
    if lay.qlora:  # QLoRA: each frozen weight dequantised for the forward and the input gradient
        deq = sum(c.memory(g.batch * g.k * g.n * dequant_bytes_per_use(lay.base_double_quant)) for g in lin)
        lora_f, lora_b = lora_f + deq, lora_b + deq
    lora_rc = lora_f if lay.recompute == "full" else 0.0  # the block re-run with its adapters (and dequantisation)
    u, ring = lay.ulysses, lay.cp // lay.ulysses  # context parallelism: Ulysses ranks inside ring/all-gather ones
    if flash:
        t_core_f, t_core_b = c.flash_attention(sum(g.flops for g in core) * 0.5 * spec.window_work)
        if lay.cp_unbalanced and ring > 1 and spec.window_work == 1.0:
            # contiguous chunks under the causal mask: the last chunk's rank does (2r - 1) / r of the mean core work
            # (chunk i attends to i full chunks and half its own) and sets the pace (Layout.cp_unbalanced)
            t_core_f, t_core_b = ((2 * ring - 1) / ring * x for x in (t_core_f, t_core_b))
        # selective recompute of a flash core re-runs its forward too (Megatron checkpoints core attention;
        # MaxText's minimal policies do not save the kernel's softmax statistics)
        core_rc = t_core_f if lay.recompute in ("full", "mlp", "full-except-qkv", "selective") else 0.0
    else:
        t_core_f = sum(c.gemm(g, False) for g in core)
        t_core_b = 2.0 * t_core_f
        core_rc = t_core_f if "attn_scores" in rc else 0.0
    shard = t if lay.sp else 1
    rep, tp_part = c.elementwise_per_token(shard)
    t_ew_f = c.memory(tokens * (rep + tp_part / t) * c.act)
    mlp_share = tp_part / t / (rep + tp_part / t)
    # a materialised core's score traffic, bytes per score: forward, softmax 4 (read the scores, write the
    # probabilities: Megatron's fused scale-mask-softmax), dropout 5 (read 2, write 2 and a 1-byte mask); backward,
    # dropout 5 (read the gradient and the mask, write 2), softmax 6 (read the probabilities and their gradient,
    # write 2). It was costed as twice the forward (18 with dropout, not 11): the materialised Megatron rows (SC21,
    # Korthikanti 2022, the Zero Bubble paper) read 4-17% slow.
    drop = 1 if spec.dropout else 0
    scores_tok = 0.0 if flash else (spec.heads / t) * spec.seq
    sm_f, sm_b = ((4 + 5 * drop) * c.act, (6 + 5 * drop) * c.act) if c.fused else eager_score_bytes(c.act == 2, drop)
    t_sm_f = c.memory(tokens * sm_f * scores_tok)
    t_sm_b = c.memory(tokens * sm_b * scores_tok)
    # op-sac re-runs the block's forward with saved ops replayed: every elementwise kernel runs again, and the
    # TP all-gathers (not in its save list) but not the reduce-scatters
    ew_rc = {"full": 1.0, "full-except-qkv": 1.0, "op-sac": 1.0, "mlp": mlp_share,
             "mlp-in": 0.5 * mlp_share}.get(lay.recompute, 0.0)
    tp_rc = {"full": 1.0, "full-except-qkv": 1.0, "mlp": 0.5, "op-sac": 0.5}.get(lay.recompute, 0.0)
    if early:  # nor the residual add after it, nor its TP reduction
        ew_rc = max(0.0, ew_rc - 6 * spec.hidden / shard / (rep + tp_part / t))
        tp_rc = max(0.0, tp_rc - 0.5)

    comm: dict[str, float] = {}

    def add_comm(link: coll.Link, nbytes: float, times: float = 1.0) -> None:
        if link.name != "local":
            comm[link.name] = comm.get(link.name, 0.0) + nbytes * times

    tp_link = coll.group_link(hw, t, 1, net)
    msg = tokens * spec.hidden * 2 * c.act
    if t > 1 and lay.sp:
        t_tp_f = 2 * (coll.all_gather_time(msg, t, tp_link) + coll.reduce_scatter_time(msg, t, tp_link))
        tp_bytes_f = 4 * (t - 1) / t * msg
    elif t > 1:
        t_tp_f = 2 * coll.all_reduce_time(msg, t, tp_link, "ring")
        tp_bytes_f = 2 * coll.all_reduce_bytes_per_device(msg, t)
    else:
        t_tp_f, tp_bytes_f = 0.0, 0.0
    # the layout copies beside each collective (Layout.tp_copies): read and write the gathered tensor, 4 a pass,
    # on the compute stream (not hidden by an overlap of the collectives)
    t_copy_f = 4 * c.memory(2 * msg) if t > 1 and lay.sp and lay.tp_copies else 0.0
    t_tp = (2 + tp_rc) * t_tp_f
    if lay.tp_overlap:
        t_tp = exposed(t_tp, gemm_f + gemm_b + gemm_rc, eff)
    t_tp += (2 + tp_rc) * t_copy_f
    add_comm(tp_link, tp_bytes_f, 2 + tp_rc)

    t_cp = 0.0
    kv_chunk = tokens * 2 * spec.kv_dim * 2 * c.act / t  # this rank's K and V (its TP heads)
    if u > 1:
        t_cp, kv_chunk = ulysses_time(spec, u, t, tokens, c, hw, net, core_rc > 0, add_comm)
    if ring > 1:
        cp_link = coll.group_link(hw, ring, t * u, net)
        if lay.framework in CP_ALL_GATHER:
            kv = kv_chunk * ring
            t_cp_raw = coll.all_gather_time(kv, ring, cp_link) + coll.reduce_scatter_time(kv, ring, cp_link)
            t_cp += exposed(t_cp_raw, t_core_f + t_core_b, eff)
            add_comm(cp_link, 2 * (ring - 1) / ring * kv)
        else:
            t_ring, cp_bytes = cp_ring_time(kv_chunk, ring, coll.channel_capped(cp_link, hw, lay.cp_channels, net),
                                            t_core_f, t_core_b, core_rc > 0, eff)
            t_cp += t_ring
            add_comm(cp_link, cp_bytes)

    t_ep = 0.0
    if moe and lay.ep > 1:
        ep_link = coll.group_link(hw, lay.ep, t * lay.cp, net)
        a2a = tokens * spec.top_k * spec.capacity * spec.hidden * 2 * c.act / t * (lay.ep - 1) / lay.ep
        n_a2a = 4 + (2 if lay.recompute in ("full", "mlp", "full-except-qkv", "op-sac") else 0)
        t_ep = n_a2a * ((lay.ep - 1) * ep_link.alpha_s + a2a / ep_link.bw)
        add_comm(ep_link, a2a, n_a2a)

    terms = {
        "gemm": gemm_f + gemm_b + gemm_rc,
        "attention": t_core_f + t_core_b + core_rc,
        "elementwise": (3 + ew_rc) * t_ew_f + (1 + (1 if "attn_scores" in rc else 0)) * t_sm_f + t_sm_b,
        "casts": cast_f + cast_b + cast_rc,
        "tp_comm": t_tp,
        "cp_comm": t_cp,
        "ep_comm": t_ep,
        "lora": lora_f + lora_b + lora_rc,
    }
    backward = lora_b + gemm_b + t_core_b + 2 * t_ew_f + t_sm_b + cast_b + t_tp_f + t_copy_f + t_ep / 2
    return BlockTime(terms, backward, comm, sum(c.wgrad(g) for g in lin))
