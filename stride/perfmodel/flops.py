"""Analytic parameter and FLOP counts of a transformer (matmuls only, 2 FLOPs per multiply-add).

Conventions, chosen to match `torch.utils.flop_counter` (tested) and Megatron's
`num_floating_point_operations`: attention scores and attention-times-V count the full s x s
square (no causal halving); backward is twice forward; elementwise ops, softmax, norms and the
embedding lookup count zero. `executed_*` adds what recompute re-runs.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def layer_params(spec: TransformerSpec) -> int:
    """Weights (and biases, norms) of one transformer block."""
    h, f = spec.hidden, spec.ffn
    qkv = h * (h + 2 * spec.kv_dim)
    out = h * h
    mlp = (3 if spec.act == "swiglu" else 2) * h * f
    norms = 2 * (2 * h if spec.bias else h)
    biases = (h + 2 * spec.kv_dim + h + (2 * f if spec.act == "swiglu" else f) + h) if spec.bias else 0
    return qkv + out + mlp + norms + biases


def embedding_params(spec: TransformerSpec) -> int:
    """Input embedding (+ learned positions); the output head when tied counts here once."""
    return spec.vocab * spec.hidden + (spec.seq * spec.hidden if spec.learned_pos else 0)


def head_params(spec: TransformerSpec) -> int:
    """Untied output projection (+ final norm)."""
    norm = 2 * spec.hidden if spec.bias else spec.hidden
    return norm + (0 if spec.tied_embeddings else spec.vocab * spec.hidden)


def total_params(spec: TransformerSpec) -> int:
    return spec.layers * layer_params(spec) + embedding_params(spec) + head_params(spec)


def layer_gemms(spec: TransformerSpec, tokens: int, tp: int = 1, cp: int = 1) -> list[Gemm]:
    """Forward matmuls of one block on one tensor-parallel rank.

    `tokens` is batch * seq of the micro-batch on this rank's context shard (seq / cp); the
    attention core multiplies these queries by the full sequence of keys."""
    h, d = spec.hidden, spec.head_dim
    seq_local = spec.seq // cp
    batch_seqs = tokens // seq_local
    f_in = spec.ffn * (2 if spec.act == "swiglu" else 1)
    heads_local = spec.heads // tp
    return [
        Gemm("qkv", tokens, (h + 2 * spec.kv_dim) // tp, h),
        Gemm("attn_scores", seq_local, spec.seq, d, batch_seqs * heads_local),
        Gemm("attn_values", seq_local, d, spec.seq, batch_seqs * heads_local),
        Gemm("attn_out", tokens, h, h // tp),
        Gemm("mlp_in", tokens, f_in // tp, h),
        Gemm("mlp_out", tokens, h, spec.ffn // tp),
    ]


def logits_gemm(spec: TransformerSpec, tokens: int, tp: int = 1) -> Gemm:
    return Gemm("logits", tokens, spec.vocab // tp, spec.hidden)


ATTENTION_CORE = ("attn_scores", "attn_values")


def layer_forward_flops(spec: TransformerSpec, tokens: int) -> float:
    return sum(g.flops for g in layer_gemms(spec, tokens))


def forward_flops(spec: TransformerSpec, tokens: int) -> float:
    """Whole-model forward FLOPs for `tokens` (a multiple of seq)."""
    return spec.layers * layer_forward_flops(spec, tokens) + logits_gemm(spec, tokens).flops


def model_flops(spec: TransformerSpec, tokens: int) -> float:
    """Forward + backward, no recompute: the FLOPs MFU counts (Megatron convention)."""
    return 3.0 * forward_flops(spec, tokens)


def recompute_flops(spec: TransformerSpec, tokens: int, recompute: str) -> float:
    """Extra forward FLOPs re-run in backward: full = every block, selective = attention core."""
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {RECOMPUTE_MODES}, got {recompute!r}")
    if recompute == "none":
        return 0.0
    gemms = layer_gemms(spec, tokens)
    if recompute == "full":
        return spec.layers * sum(g.flops for g in gemms)
    return spec.layers * sum(g.flops for g in gemms if g.name in ATTENTION_CORE)


def executed_flops(spec: TransformerSpec, tokens: int, recompute: str = "none") -> float:
    """Model FLOPs plus recompute: the FLOPs the hardware runs (HFU numerator)."""
    return model_flops(spec, tokens) + recompute_flops(spec, tokens, recompute)
