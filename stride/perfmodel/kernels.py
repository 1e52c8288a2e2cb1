"""Cost of single kernels on one device: GEMMs as a summed roofline, memory-bound elementwise
passes, the loss, and the casts of low-precision training.

A GEMM costs FLOPs / (peak x gemm efficiency) + bytes / (HBM bandwidth x memory efficiency), so
skinny shapes lose throughput smoothly. Which peak: FP8/FP4 block GEMMs use the recipe's dtype
(precision.py); the attention core, embedding and (unless said) the LM head run in 16-bit.
"""

from __future__ import annotations

from stride.perfmodel.attention_kernels import attention_tflops, default_kernel
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.flops import Gemm
from stride.perfmodel.frameworks import FRAMEWORKS
from stride.perfmodel.hardware import Hardware
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import TransformerSpec
from stride.perfmodel.precision import recipe

LOW_PRECISION_GEMMS = ("qkv", "attn_out", "mlp_in", "mlp_out", "expert_in", "expert_out")


# An RMSNorm written as PyTorch ops (Hugging Face's LlamaRMSNorm, torchtitan's and torchtune's, nn.RMSNorm before
# torch 2.9) moves, per element of a 16-bit activation, forward: the fp32 upcast 2+4 B, pow 4+4, mean 4, the scaling
# multiply 4+4, the downcast 4+2, the weight multiply 2+2 = 36 B, where one fused kernel reads 2 and writes 2: 32 B
# more (its autograd backward runs the mirror chain: the 2x of block_time's backward). A rotary embedding so written
# (HF's q*cos + rotate_half(q)*sin: multiply 4, negate half 2, concatenate 4, multiply 4, add 6; torchtitan's complex
# product: upcast 6, complex multiply 8, downcast 6) moves ~20 B per q/k element where one rotary kernel's 6 are
# counted: 14 B more. Both read from the libraries' code, not fitted.
EAGER_RMSNORM_EXTRA = 32.0
EAGER_ROPE_EXTRA = 14.0
# An MoE layer so written (torchtitan's MoE.forward at f738a03bf, models/moe.py, and its expert_parallel wrapper) moves,
# per element of each routed token copy (top_k x hidden), forward: torch.gather of the routed rows 2+2, the fp32 score
# multiply (upcast 2+4, multiply 4+4, downcast 4+2), the grouped-GEMM alignment permute and unpermute 2+2 each, and
# scatter_add into the output 2 read + 2+2 = 38 B, where one fused permute and unpermute are counted as 4: 34 B more.
# Hugging Face's MoE blocks (a loop over experts with index_add_) move at least as much.
EAGER_MOE_ROUTING_EXTRA = 34.0
# Megatron-Core's GPT-OSS experts without Transformer Engine's op fuser (row_text.megatron_eager_expert_epilogue), per
# routed row, read from its code: the eager clamp of each GLU half (read and write 2 B of each of the 2 f values) and
# the torch.cat that joins them (the same again) before the compiled activation, 16 B per fc1-output column forward,
# about 12 backward (two clamp gradients); fc2's bias scaled by the fp32 router probability (b * p, t + b * p in fp32,
# torch.cat of the per-expert fp32 pieces, the cast back: 2 + 4 + 4 + 4 + 4 + 4 + 4 + 2 = 28 B per hidden value)
# forward, about 22 backward (the cast's, the add's and the bias/probability reductions). That is 28 f + 50 h bytes a
# row; block_time costs elementwise bytes once forward and twice backward, so a third of it is counted here.
EXPERT_EPILOGUE_BYTES = (28.0 / 3, 50.0 / 3)  # (per expert-ffn column, per hidden value)

# parts with no matmul figure at all (a user's own entry): the median MAMF fraction of the catalog's GPUs
DEFAULT_MATMUL_FRACTION = 0.80


def gemm_efficiency(hw: Hardware, eff: Efficiency, dtype: str) -> float:
    """Fraction of the `dtype` peak a training GEMM reaches: the part's published best (MAMF) times the
    shared `gemm` factor; TPUs, which publish no MAMF figure, their class factor `gemm_tpu`."""
    frac = hw.matmul_fraction(dtype)
    if frac is None and hw.vendor == "google":
        return eff.gemm_tpu
    return (frac or DEFAULT_MATMUL_FRACTION) * eff.gemm


class Costs:
    """Per-kernel cost helpers bound to one device type, layout and efficiency set."""

    def __init__(self, hw: Hardware, eff: Efficiency, lay: Layout, spec: TransformerSpec):
        self.hw, self.eff, self.lay, self.spec = hw, eff, lay, spec
        self.fw = FRAMEWORKS[lay.framework]
        p = lay.precision
        high = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16"}.get(p, "bf16")
        self.peak_high = hw.peak_flops(high)
        self.low = p in ("fp8", "fp4")
        self.recipe = recipe(lay.fp8_recipe) if self.low else None
        self.peak_low = hw.peak_flops(self.recipe.gemm_dtype) if self.recipe else self.peak_high
        self.gemm_eff = gemm_efficiency(hw, eff, high)
        self.gemm_eff_low = gemm_efficiency(hw, eff, self.recipe.gemm_dtype) if self.recipe else self.gemm_eff
        self.mem_bw = hw.memory_bw * eff.memory
        self.act = 2 if p in ("fp32", "tf32") else 1  # fp32 activations: twice the 16-bit bytes
        self.in16 = 4 if p in ("fp32", "tf32") else 2
        self.fused = self.fw.fused_elementwise or lay.compile

    @property
    def attention_kernel(self) -> str:
        """The fused attention kernel this run uses: the layout's, else its framework's on this part."""
        k = self.lay.attn_kernel
        return default_kernel(self.lay.framework, self.hw.generation) if k == "auto" else k

    def flash_attention(self, causal_flops: float) -> tuple[float, float]:
        """Seconds of a fused attention core's forward and backward (2.5x the forward FLOPs) for
        `causal_flops` forward FLOPs: the published curve of the run's kernel on this part at its
        sequence length and head dim, else (TPUs, CPUs, a catalog `attention_efficiency`) a fraction
        of the 16-bit peak."""
        if self.hw.attention_efficiency is None:
            rates = attention_tflops(self.attention_kernel, self.hw, self.spec.seq // self.lay.cp, self.spec.head_dim)
            if rates is not None:
                # the curves are 16-bit kernels; an fp32/tf32 run's fused attention (memory-efficient SDPA: no
                # FlashAttention kernel takes fp32) goes at most at that precision's share of the 16-bit peak (audit
                # 22, F4: fp32 at the bf16 rate read an MFU of 700 %)
                sixteen = self.hw.peak_tflops.get("bf16", self.hw.peak_tflops.get("fp16", 0.0)) * 1e12
                wide = self.lay.precision in ("fp32", "tf32") and sixteen > 0
                scale = min(1.0, self.peak_high / sixteen) if wide else 1.0
                f, b = (r * 1e12 * self.eff.flash * scale for r in rates)
                return causal_flops / f, 2.5 * causal_flops / b
        rate = self.peak_high * (self.hw.attention_efficiency or self.eff.attention)
        return causal_flops / rate, 2.5 * causal_flops / rate

    def is_low(self, g: Gemm) -> bool:
        return self.low and (g.name in LOW_PRECISION_GEMMS or (g.name == "logits" and self.lay.fp8_head))

    def gemm(self, g: Gemm, low: bool | None = None) -> float:
        low = self.is_low(g) if low is None else low
        ib = (0.5 if self.recipe and self.recipe.gemm_dtype == "fp4" else 1) if low else self.in16
        nbytes = g.batch * (ib * (g.m * g.k + g.k * g.n) + 2 * self.act * g.m * g.n)
        rate = self.peak_low * self.gemm_eff_low if low else self.peak_high * self.gemm_eff
        return g.flops / rate + nbytes / self.mem_bw

    def backward_gemms(self, g: Gemm) -> float:
        """dgrad and wgrad of one forward GEMM; the wgrad stays 16-bit where the recipe says. Frozen (LoRA)
        weights need no wgrad: the backward runs the dgrad only (the rank-r adapters' GEMMs are left out: at
        rank 16 on an 8192-wide layer they are 0.2% of the base GEMM)."""
        low = self.is_low(g)
        if self.lay.frozen:
            return self.gemm(g, low)
        return self.gemm(g, low) + self.wgrad(g)

    def wgrad(self, g: Gemm) -> float:
        """The weight-gradient GEMM alone (none for frozen weights): the work a zero-bubble schedule defers."""
        if self.lay.frozen:
            return 0.0
        return self.gemm(g, self.is_low(g) and self.recipe is not None and self.recipe.wgrad_low)

    def memory(self, nbytes: float) -> float:
        return nbytes / self.mem_bw

    def elementwise_per_token(self, shard: int) -> tuple[float, float]:
        """Forward elementwise elements per token of one block: (replicated over TP unless SP, TP-sharded).

        Fused kernels (Megatron/TE, XLA, torch.compile): two norms, two residual/bias-dropout-adds,
        the activation (gelu/relu: read f write f; gated: read 2f write f). Eager PyTorch adds the
        attention layout copies (q/k/v and output transposes), unfused RoPE and the gated product
        as its own kernel; model code that writes its RMSNorm and RoPE as chains of ops (layout.eager_norm,
        eager_rope: Hugging Face, torchtitan, torchtune) adds those chains' passes."""
        s, h = self.spec, self.spec.hidden
        f = s.expert_ffn * s.top_k * s.capacity if s.moe else s.ffn
        # XLA:TPU fuses activation, residual and casts into the dots (the norms remain); XLA:GPU calls
        # cuBLAS for dots and fuses only bias/activation epilogues into them (xla/service/gpu
        # gemm_rewriter), so its elementwise chains run as fused loops: the fused-kernel count below
        if self.fw.xla_fusion and self.hw.vendor == "google":
            return 8 * h / shard, 4 * s.top_k * h if s.moe else 0.0
        drop = 2 * h if s.dropout else 0
        rep = 8 * h + 12 * h + drop
        tp_part = (6 if s.gated else 4) * f
        if not self.fused:
            rope = 0 if s.learned_pos else 6 * (s.q_dim + s.kv_dim)
            tp_part += 6 * (s.q_dim + s.kv_dim) + 2 * s.q_dim + rope + (2 * f if s.gated else 0)
            if self.lay.eager_norm:  # two RMSNorms a block
                rep += 2 * EAGER_RMSNORM_EXTRA * h
            if self.lay.eager_rope and not s.learned_pos:
                tp_part += EAGER_ROPE_EXTRA * (s.q_dim + s.kv_dim)
        if s.moe:
            tp_part += 4 * s.top_k * h  # token permute and unpermute (read + write each)
            if not self.fused and (self.lay.eager_norm or self.lay.eager_rope):  # eager model code's routing chain
                tp_part += EAGER_MOE_ROUTING_EXTRA * s.top_k * h
            if self.lay.eager_expert_epilogue:
                per_f, per_h = EXPERT_EPILOGUE_BYTES
                tp_part += s.top_k * s.capacity * (per_f * s.expert_ffn + per_h * h)
        return rep / shard, tp_part

    def loss_bytes_per_logit(self) -> float:
        if self.lay.fused_loss:
            return 4.0
        return self.fw.ce_bytes_per_logit

    def casts(self, g: Gemm, weights_cached: bool) -> tuple[float, float]:
        """Seconds of the FP8/FP4 casts around a low-precision GEMM: (forward, backward)."""
        if not (self.recipe and self.is_low(g)):
            return 0.0, 0.0
        per = self.recipe.cast_read + self.recipe.cast_write + self.recipe.extra_pass
        fwd = per * g.batch * g.m * g.k + (0.0 if weights_cached else per * g.batch * g.k * g.n)
        return self.memory(fwd), self.memory(per * g.batch * g.m * g.n)
