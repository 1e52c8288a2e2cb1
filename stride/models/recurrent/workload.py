"""The recurrent and convolutional workloads (lstm, tcn, deeplob): one size table, three builders."""

from __future__ import annotations

from typing import Any

from torch import nn

from stride.config.schema import ModelConfig
from stride.models.recurrent.model import DeepLOBForecaster, LSTMForecaster, TCNForecaster
from stride.models.workload import n_quantiles, sized

SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"width": 32, "n_layers": 2},
    "small": {"width": 64, "n_layers": 3},
    "base": {"width": 128, "n_layers": 4},
    "large": {"width": 256, "n_layers": 6},
}


def _kwargs(cfg: ModelConfig, workload: str) -> dict[str, Any]:
    kw = sized(SIZES, cfg, workload)
    if cfg.d_model is not None:
        kw["width"] = cfg.d_model
    if cfg.n_layers is not None:
        kw["n_layers"] = cfg.n_layers
    return kw


def build_lstm(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    kw = _kwargs(cfg, "lstm")
    return LSTMForecaster(n_features, n_horizons, hidden=kw["width"], n_layers=kw["n_layers"],
                          dropout=cfg.dropout, n_quantiles=n_quantiles(cfg))


def build_tcn(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    kw = _kwargs(cfg, "tcn")
    return TCNForecaster(n_features, n_horizons, width=kw["width"], n_layers=kw["n_layers"] + 2,
                         dropout=cfg.dropout, n_quantiles=n_quantiles(cfg))


def build_deeplob(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    kw = _kwargs(cfg, "deeplob")
    return DeepLOBForecaster(n_features, n_horizons, channels=kw["width"] // 2, hidden=kw["width"],
                             n_quantiles=n_quantiles(cfg))
