"""Analytic parameter and FLOP counts of a transformer (matmuls only, 2 FLOPs per multiply-add).

Conventions, chosen to match `torch.utils.flop_counter` (tested) and Megatron's
`num_floating_point_operations`: attention scores and attention-times-V count the full s x s
square (no causal halving); backward is twice forward; elementwise ops, softmax, norms and the
embedding lookup count zero. `executed_*` adds what recompute re-runs. MoE layers count the
top-k experts each token uses (the "activated" FLOPs), not the capacity padding a dropping
router executes (that padding is time, see `layer_gemms`, not model FLOPs).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from stride.perfmodel.model_spec import TransformerSpec

RECOMPUTE_MODES = ("none", "selective", "full")


@dataclass(frozen=True)
class Gemm:
    """One matmul (batched `batch` times): (m x k) @ (k x n)."""

    name: str
    m: int
    n: int
    k: int
    batch: int = 1

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch


def _mlp_params(spec: TransformerSpec, ffn: int) -> int:
    return (3 if spec.gated else 2) * spec.hidden * ffn


def layer_params(spec: TransformerSpec, moe: bool = False) -> int:
    """Weights (and biases, norms) of one transformer block; `moe` for an MoE block (all experts)."""
    h, f = spec.hidden, spec.ffn
    qkv = h * (spec.q_dim + 2 * spec.kv_dim)
    out = spec.q_dim * h
    mlp = spec.experts * _mlp_params(spec, spec.expert_ffn) + h * spec.experts if moe else _mlp_params(spec, f)
    norms = 2 * (2 * h if spec.bias else h)
    f_in = 2 * f if spec.gated else f
    biases = (spec.q_dim + 2 * spec.kv_dim + h + f_in + h) if spec.bias and not moe else 0
    return qkv + out + mlp + norms + biases


def active_layer_params(spec: TransformerSpec, moe: bool = False) -> int:
    """Parameters one token's forward touches in a block (MoE: its top-k experts)."""
    if not moe:
        return layer_params(spec)
    experts = spec.experts * _mlp_params(spec, spec.expert_ffn)
    return layer_params(spec, True) - experts + spec.top_k * _mlp_params(spec, spec.expert_ffn)


def embedding_params(spec: TransformerSpec) -> int:
    """Input embedding (+ learned positions); the output head when tied counts here once."""
    return spec.vocab * spec.hidden + (spec.seq * spec.hidden if spec.learned_pos else 0)


def head_params(spec: TransformerSpec) -> int:
    """Untied output projection (+ final norm)."""
    norm = 2 * spec.hidden if spec.bias else spec.hidden
    return norm + (0 if spec.tied_embeddings else spec.vocab * spec.hidden)


def blocks_params(spec: TransformerSpec, active: bool = False) -> int:
    per = active_layer_params if active else layer_params
    n_moe = spec.moe_layers
    return (spec.layers - n_moe) * per(spec) + n_moe * per(spec, True)


def total_params(spec: TransformerSpec) -> int:
    return blocks_params(spec) + embedding_params(spec) + head_params(spec)


def active_params(spec: TransformerSpec) -> int:
    """Parameters a token's forward pass uses (total for dense models)."""
    return blocks_params(spec, active=True) + embedding_params(spec) + head_params(spec)


def layer_gemms(spec: TransformerSpec, tokens: int, tp: int = 1, cp: int = 1, moe: bool = False,
                ep: int = 1) -> list[Gemm]:
    """Forward matmuls of one block on one device (tensor rank `tp`, context shard `cp`).

    `tokens` is batch * seq of the micro-batch on this rank's context shard (seq / cp); the
    attention core multiplies these queries by the full sequence of keys. An MoE block's experts
    (E / ep of them on this device, tensor-sharded like the dense MLP) process tokens x top_k x
    capacity token-expert pairs in all: expert parallelism moves tokens, not work."""
    h, d = spec.hidden, spec.head_dim
    seq_local = spec.seq // cp
    batch_seqs = tokens // seq_local
    heads_local = spec.heads // tp
    gemms = [
        Gemm("qkv", tokens, (spec.q_dim + 2 * spec.kv_dim) // tp, h),
        Gemm("attn_scores", seq_local, spec.seq, d, batch_seqs * heads_local),
        Gemm("attn_values", seq_local, d, spec.seq, batch_seqs * heads_local),
        Gemm("attn_out", tokens, h, spec.q_dim // tp),
    ]
    if not moe:
        f_in = spec.ffn * (2 if spec.gated else 1)
        return gemms + [Gemm("mlp_in", tokens, f_in // tp, h), Gemm("mlp_out", tokens, h, spec.ffn // tp)]
    ef = spec.expert_ffn
    local = max(1, spec.experts // ep)
    rows = max(1, round(tokens * spec.top_k * spec.capacity / local))  # per local expert
    f_in = ef * (2 if spec.gated else 1)
    return gemms + [
        Gemm("router", tokens, spec.experts, h),
        Gemm("expert_in", rows, f_in // tp, h, local),
        Gemm("expert_out", rows, h, ef // tp, local),
    ]


def logits_gemm(spec: TransformerSpec, tokens: int, tp: int = 1) -> Gemm:
    return Gemm("logits", tokens, spec.vocab // tp, spec.hidden)


ATTENTION_CORE = ("attn_scores", "attn_values")
MLP_GEMMS = ("mlp_in", "mlp_out", "expert_in", "expert_out", "router")


def _model_gemms(spec: TransformerSpec, tokens: int, moe: bool) -> list[Gemm]:
    """A block's forward matmuls by model FLOPs: MoE experts at exactly top_k per token."""
    gemms = layer_gemms(spec, tokens, moe=False)
    if not moe:
        return gemms
    ef, f_in = spec.expert_ffn, spec.expert_ffn * (2 if spec.gated else 1)
    return gemms[:4] + [Gemm("router", tokens, spec.experts, spec.hidden),
                        Gemm("expert_in", tokens * spec.top_k, f_in, spec.hidden),
                        Gemm("expert_out", tokens * spec.top_k, spec.hidden, ef)]


def layer_forward_flops(spec: TransformerSpec, tokens: int, moe: bool = False) -> float:
    return sum(g.flops for g in _model_gemms(spec, tokens, moe))


def forward_flops(spec: TransformerSpec, tokens: int) -> float:
    """Whole-model forward FLOPs for `tokens` (a multiple of seq)."""
    n_moe = spec.moe_layers
    return ((spec.layers - n_moe) * layer_forward_flops(spec, tokens) + n_moe * layer_forward_flops(spec, tokens, True)
            + logits_gemm(spec, tokens).flops)


@lru_cache(maxsize=4096)
def model_flops(spec: TransformerSpec, tokens: int) -> float:
    """Forward + backward, no recompute: the FLOPs MFU counts (Megatron convention)."""
    return 3.0 * forward_flops(spec, tokens)


@lru_cache(maxsize=4096)
def recompute_flops(spec: TransformerSpec, tokens: int, recompute: str) -> float:
    """Extra forward FLOPs re-run in backward: full = every block, selective = attention core."""
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {RECOMPUTE_MODES}, got {recompute!r}")
    if recompute == "none":
        return 0.0
    if recompute == "full":
        return forward_flops(spec, tokens) - logits_gemm(spec, tokens).flops
    core = sum(g.flops for g in layer_gemms(spec, tokens) if g.name in ATTENTION_CORE)
    return spec.layers * core


def causal_model_flops(spec: TransformerSpec, tokens: int) -> float:
    """Model FLOPs with the attention core's causal half only: what a causal kernel runs, and Megatron-Core's own
    count since 2025-03 (measured.py). A step cannot do more of these per second than the peak, so the planner's MFU
    stays under 100 % where attention dominates (the full square counted 1.02x at 262k tokens, audit 22)."""
    return model_flops(spec, tokens) - 1.5 * recompute_flops(spec, tokens, "selective")  # selective = every core


def executed_flops(spec: TransformerSpec, tokens: int, recompute: str = "none") -> float:
    """Model FLOPs plus recompute: the FLOPs the hardware runs (HFU numerator)."""
    return model_flops(spec, tokens) + recompute_flops(spec, tokens, recompute)
