"""The transformer workloads: ts_transformer (forecasting) and token_lm (next token), sizes and builders."""

from __future__ import annotations

from typing import Any

from torch import nn

from stride.config.errors import ConfigError
from stride.config.schema import ModelConfig
from stride.models.transformer.model import TimeSeriesTransformer
from stride.models.transformer.token_lm import TokenLM
from stride.models.workload import n_quantiles, sized

SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"d_model": 64, "n_layers": 2, "n_heads": 4},
    "small": {"d_model": 128, "n_layers": 4, "n_heads": 4},
    "base": {"d_model": 256, "n_layers": 6, "n_heads": 8},
    "large": {"d_model": 512, "n_layers": 8, "n_heads": 8},
}
OVERRIDES = ("d_model", "n_layers", "n_heads", "ffn_mult")  # `[model]` keys that amend the size's row


def _kwargs(cfg: ModelConfig, workload: str) -> dict[str, Any]:
    kw = sized(SIZES, cfg, workload)
    kw.update({key: getattr(cfg, key) for key in OVERRIDES if getattr(cfg, key) is not None})
    return kw


def build_ts_transformer(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    kw = _kwargs(cfg, "ts_transformer")
    if kw["d_model"] % kw["n_heads"] or (kw["d_model"] // kw["n_heads"]) % 2:
        raise ConfigError(
            f"`model.d_model` = {kw['d_model']} must split into `model.n_heads` = {kw['n_heads']} heads "
            "of even size (RoPE rotates pairs)"
        )
    return TimeSeriesTransformer(
        n_features, seq_len, n_horizons, patch_len=cfg.patch_len, causal=cfg.causal,
        dropout=cfg.dropout, n_quantiles=n_quantiles(cfg), **kw,
    )


def build_token_lm(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    """n_features is the vocabulary size (see stride.data.tokens)."""
    return TokenLM(n_features, seq_len, dropout=cfg.dropout, **_kwargs(cfg, "token_lm"))
