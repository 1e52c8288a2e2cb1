"""A model stride builds from the config: `model.name = "mypkg.models:build"`.

stride calls `build(n_features=, seq_len=, n_horizons=, **model.kwargs)` with the data's shape. The
model receives windows `x` of shape [B, seq_len, n_features] and must return [B, n_horizons], one
prediction per forecast horizon of `data.horizons`; the trainer checks that against the targets.
"""

from __future__ import annotations

import torch
from torch import nn


class GRUForecaster(nn.Module):
    def __init__(self, n_features: int, n_horizons: int, hidden: int = 32) -> None:
        super().__init__()
        self.gru = nn.GRU(n_features, hidden, batch_first=True)
        self.head = nn.Linear(hidden, n_horizons)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, F] -> [B, n_horizons]
        out, _ = self.gru(x)
        return self.head(out[:, -1])


def build(n_features: int, seq_len: int, n_horizons: int, hidden: int = 32) -> nn.Module:
    return GRUForecaster(n_features, n_horizons, hidden)
