"""Building blocks of the sequence models, written for one device in plain PyTorch.

Parallelism, compilation and activation checkpointing are applied from outside (`stride.train.apply`,
`stride.parallel`, following `parallelize.py`'s plan of these modules' names), so nothing here knows
about them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

FFN_MULT = 8 / 3  # the default: a SwiGLU of 3 matrices holds as many parameters as a 4 x d_model GeLU MLP


def ffn_hidden(ffn_mult: float, d_model: int) -> int:
    """The SwiGLU hidden size of both transformers: ffn_mult x d_model rounded to a multiple of 8."""
    return int(round(ffn_mult * d_model / 8)) * 8


class RMSNorm(nn.Module):
    """Root-mean-square norm: cheaper than LayerNorm (no mean, no bias), standard in modern transformers.

    `kernel`, when set from outside (stride.train.kernels_apply), replaces the torch code with a fused
    op of the same signature `kernel(x, weight, eps)`; the model itself never chooses one.
    """

    kernel = None

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel is not None:
            return self.kernel(x, self.weight, self.eps)
        # at least fp32 (bf16 / fp16 upcast), float64 kept: a float64 reference was fp32-exact here (1e-8)
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.to(xf.dtype)).to(x.dtype)


def rope_cache(seq_len: int, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [seq_len, head_dim/2] for rotary position embeddings, on the default device.

    Under `torch.device("meta")` (the launcher's and the resource check's size and layout checks) only their
    shape: computed there, these float64 ops would run through PyTorch's meta decompositions, whose first use
    imports torch._dynamo (1.5 s of a `stride train --nproc` launcher's start on a 2-core host)."""
    if torch.get_default_device().type == "meta":
        shape = (seq_len, (head_dim + 1) // 2)
        return torch.empty(shape, dtype=torch.float32), torch.empty(shape, dtype=torch.float32)
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    ang = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv)
    return ang.cos().float(), ang.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[..., 2i], x[..., 2i+1]); x is [B, heads, T, head_dim]."""
    xf = x.to(torch.promote_types(x.dtype, torch.float32))  # at least fp32, float64 kept (as RMSNorm)
    x1, x2 = xf[..., 0::2], xf[..., 1::2]
    c, s = cos[: x.shape[-2]], sin[: x.shape[-2]]
    out = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    return out.to(x.dtype)


class Attention(nn.Module):
    """Multi-head self-attention with RoPE on PyTorch SDPA (flash backend on CPU and GPU).

    q, k and v have their own projections, so tensor parallelism can split each by output rows
    (column-wise) and hand every rank whole heads; the head count is read from the projection's
    output, so a rank holding n_heads/tp heads runs this code unchanged and `wo` takes that rank's
    part of d_model. On one device three projections cost no more than one fused [q; k; v] weight
    (measured: docs/parallel.md, benchmarks/attention_layout.py).
    """

    rope_kernel = None  # `rope_kernel(x, cos, sin)`, set from outside like RMSNorm.kernel

    def __init__(self, d_model: int, n_heads: int, causal: bool, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads, self.head_dim, self.causal, self.dropout = n_heads, d_model // n_heads, causal, dropout
        self.wq = nn.Linear(d_model, d_model, bias=False)
        self.wk = nn.Linear(d_model, d_model, bias=False)
        self.wv = nn.Linear(d_model, d_model, bias=False)
        self.wo = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        # [B, T, heads * head_dim] -> [B, heads, T, head_dim]; heads = n_heads / tp on a TP rank
        q, k, v = (w(x).view(b, t, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        rope = self.rope_kernel or apply_rope
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=self.causal, dropout_p=self.dropout if self.training else 0.0
        )
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class SwiGLU(nn.Module):
    """Gated MLP (SiLU(x W1) * x W3) W2: better loss per FLOP than a GELU MLP at equal parameters."""

    kernel = None  # `kernel(gate, up) -> silu(gate) * up`, set from outside like RMSNorm.kernel

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, hidden, bias=False)
        self.w3 = nn.Linear(d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel is not None:
            return self.w2(self.kernel(self.w1(x), self.w3(x)))
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, d_model: int, n_heads: int, ffn_hidden: int, causal: bool, dropout: float) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(d_model)
        self.attn = Attention(d_model, n_heads, causal, dropout)
        self.mlp_norm = RMSNorm(d_model)
        self.mlp = SwiGLU(d_model, ffn_hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))
