"""MLP over tabular features: the window's features flattened, residual blocks, multi-horizon head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from stride.models.plan import ParallelPlan


class MLPBlock(nn.Module):
    def __init__(self, width: int, expansion: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, expansion * width)
        self.fc2 = nn.Linear(expansion * width, width)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc1(self.norm(x)))
        return x + F.dropout(self.fc2(h), self.dropout, self.training)


class TabularMLP(nn.Module):
    """[B, T, F] (or [B, F]) -> [B, H] / [B, H, Q]. `blocks` is a ModuleList for checkpointing."""

    parallel_plan = ParallelPlan(blocks="blocks")  # pipeline stages, checkpointing; no tensor parallel

    def __init__(
        self,
        n_inputs: int,
        n_horizons: int,
        *,
        width: int = 128,
        n_layers: int = 2,
        expansion: int = 2,
        dropout: float = 0.0,
        n_quantiles: int = 0,
    ) -> None:
        super().__init__()
        self.n_horizons, self.n_quantiles = n_horizons, n_quantiles
        self.inp = nn.Linear(n_inputs, width)
        self.blocks = nn.ModuleList(MLPBlock(width, expansion, dropout) for _ in range(n_layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, n_horizons * max(n_quantiles, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x.flatten(1))
        for block in self.blocks:
            h = block(h)
        out = self.head(self.norm(h))
        return out.view(x.shape[0], self.n_horizons, self.n_quantiles) if self.n_quantiles else out
