"""Time-series transformer: per-step or patch embedding, RoPE, RMSNorm, SwiGLU, multi-horizon head."""

from __future__ import annotations

import torch
from torch import nn

from stride.models.transformer.layers import FFN_MULT, RMSNorm, TransformerBlock, ffn_hidden, rope_cache
from stride.models.transformer.parallelize import transformer_plan


class TimeSeriesTransformer(nn.Module):
    """Maps a window [B, T, F] of features to predictions [B, H] (or [B, H, Q] for quantiles).

    `blocks` is a ModuleList so activation checkpointing, FSDP and pipeline splits can address
    each block from outside; `parallel_plan` tells stride.parallel how to split it (parallelize.py).
    """

    parallel_plan = transformer_plan(entry="embed")

    def __init__(
        self,
        n_features: int,
        seq_len: int,
        n_horizons: int,
        *,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 4,
        ffn_mult: float = FFN_MULT,
        patch_len: int = 1,
        causal: bool = True,
        dropout: float = 0.0,
        n_quantiles: int = 0,
    ) -> None:
        super().__init__()
        if seq_len % patch_len:
            raise ValueError(f"seq_len={seq_len} is not divisible by patch_len={patch_len}")
        self.patch_len, self.causal = patch_len, causal
        self.n_horizons, self.n_quantiles = n_horizons, n_quantiles
        n_tokens = seq_len // patch_len
        hidden = ffn_hidden(ffn_mult, d_model)
        self.embed = nn.Linear(n_features * patch_len, d_model)
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, n_heads, hidden, causal, dropout) for _ in range(n_layers)
        )
        self.norm = RMSNorm(d_model)
        self.head = nn.Linear(d_model, n_horizons * max(n_quantiles, 1))
        cos, sin = rope_cache(n_tokens, d_model // n_heads)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / (2 * len(self.blocks)) ** 0.5 if name.endswith(("wo.weight", "w2.weight")) else 0.02
                nn.init.normal_(p, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # A pipeline stage (stride.parallel.stage_split) sets the parts it does not run to None:
        # without `embed` the input is already the hidden state, without `head` the hidden state is
        # the output. The full model always has both.
        if self.embed is not None:
            b, t, f = x.shape
            if self.patch_len > 1:
                x = x.reshape(b, t // self.patch_len, self.patch_len * f)
            h = self.embed(x)
        else:
            h = x
        for block in self.blocks:
            h = block(h, self.rope_cos, self.rope_sin)
        if self.head is None:
            return h
        h = self.norm(h)
        # Causal: the last token has seen the whole window; bidirectional: pool every token.
        pooled = h[:, -1] if self.causal else h.mean(dim=1)
        out = self.head(pooled)
        return out.view(len(out), self.n_horizons, self.n_quantiles) if self.n_quantiles else out
