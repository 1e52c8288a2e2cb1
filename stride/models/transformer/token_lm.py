"""GPT-style decoder over tokens, so stride's results compare with the published LLM literature.

For quants the tokens are discretised returns (see stride.data.tokens); any integer sequence works.
The loss is next-token cross-entropy; the model returns logits [B, T, V] and defines `loss`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from stride.models.transformer.layers import FFN_MULT, RMSNorm, TransformerBlock, ffn_hidden, rope_cache
from stride.models.transformer.parallelize import transformer_plan


class TokenLM(nn.Module):
    parallel_plan = transformer_plan(entry="tok")  # the blocks of layers.py, split as parallelize.py says

    def __init__(self, vocab: int, seq_len: int, *, d_model: int = 128, n_layers: int = 4, n_heads: int = 4,
                 ffn_mult: float = FFN_MULT, dropout: float = 0.0) -> None:
        super().__init__()
        self.vocab = vocab
        self.tok = nn.Embedding(vocab, d_model)
        hidden = ffn_hidden(ffn_mult, d_model)
        self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, hidden, True, dropout) for _ in range(n_layers))
        self.norm = RMSNorm(d_model)
        self.out = nn.Linear(d_model, vocab, bias=False)
        cos, sin = rope_cache(seq_len, d_model // n_heads)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.out.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # Pipeline stages set the parts they do not run to None (see TimeSeriesTransformer.forward).
        h = self.tok(tokens) if self.tok is not None else tokens
        for block in self.blocks:
            h = block(h, self.rope_cos, self.rope_sin)
        return self.out(self.norm(h)) if self.out is not None else h

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float().reshape(-1, self.vocab), targets.reshape(-1))
