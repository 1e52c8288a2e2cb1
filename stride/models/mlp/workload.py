"""The mlp workload: sizes and builder."""

from __future__ import annotations

from typing import Any

from torch import nn

from stride.config.schema import ModelConfig
from stride.models.mlp.model import TabularMLP
from stride.models.workload import n_quantiles, sized

SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"width": 128, "n_layers": 2},
    "small": {"width": 256, "n_layers": 3},
    "base": {"width": 512, "n_layers": 4},
    "large": {"width": 1024, "n_layers": 6},
}


def build_mlp(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    kw = sized(SIZES, cfg, "mlp")
    if cfg.d_model is not None:
        kw["width"] = cfg.d_model
    if cfg.n_layers is not None:
        kw["n_layers"] = cfg.n_layers
    return TabularMLP(n_features * seq_len, n_horizons, dropout=cfg.dropout, n_quantiles=n_quantiles(cfg), **kw)
