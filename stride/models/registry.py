"""Workloads by name and size, and `module:factory` models brought by the user."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from torch import nn

from stride.config.errors import ConfigError, suggest
from stride.config.schema import ModelConfig
from stride.models.mlp import TabularMLP
from stride.models.recurrent import DeepLOBForecaster, LSTMForecaster, TCNForecaster
from stride.models.token_lm import TokenLM
from stride.models.transformer import TimeSeriesTransformer

TRANSFORMER_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"d_model": 64, "n_layers": 2, "n_heads": 4},
    "small": {"d_model": 128, "n_layers": 4, "n_heads": 4},
    "base": {"d_model": 256, "n_layers": 6, "n_heads": 8},
    "large": {"d_model": 512, "n_layers": 8, "n_heads": 8},
}
MLP_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"width": 128, "n_layers": 2},
    "small": {"width": 256, "n_layers": 3},
    "base": {"width": 512, "n_layers": 4},
    "large": {"width": 1024, "n_layers": 6},
}


def _sized(sizes: dict[str, dict[str, Any]], cfg: ModelConfig, workload: str) -> dict[str, Any]:
    if cfg.size not in sizes:
        raise ConfigError(
            f"`model.size` = {cfg.size!r} is not a size of {workload}{suggest(cfg.size, list(sizes))}; "
            f"sizes are {', '.join(sizes)}"
        )
    return dict(sizes[cfg.size])


def _n_quantiles(cfg: ModelConfig) -> int:
    return len(cfg.quantiles) if cfg.loss == "quantile" else 0


def build_ts_transformer(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    kw = _sized(TRANSFORMER_SIZES, cfg, "ts_transformer")
    for key in ("d_model", "n_layers", "n_heads", "ffn_mult"):
        if getattr(cfg, key) is not None:
            kw[key] = getattr(cfg, key)
    if kw["d_model"] % kw["n_heads"] or (kw["d_model"] // kw["n_heads"]) % 2:
        raise ConfigError(
            f"`model.d_model` = {kw['d_model']} must split into `model.n_heads` = {kw['n_heads']} heads "
            "of even size (RoPE rotates pairs)"
        )
    return TimeSeriesTransformer(
        n_features, seq_len, n_horizons, patch_len=cfg.patch_len, causal=cfg.causal,
        dropout=cfg.dropout, n_quantiles=_n_quantiles(cfg), **kw,
    )


def build_mlp(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    kw = _sized(MLP_SIZES, cfg, "mlp")
    if cfg.d_model is not None:
        kw["width"] = cfg.d_model
    if cfg.n_layers is not None:
        kw["n_layers"] = cfg.n_layers
    return TabularMLP(n_features * seq_len, n_horizons, dropout=cfg.dropout, n_quantiles=_n_quantiles(cfg), **kw)


SEQ_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"width": 32, "n_layers": 2},
    "small": {"width": 64, "n_layers": 3},
    "base": {"width": 128, "n_layers": 4},
    "large": {"width": 256, "n_layers": 6},
}


def _seq_kw(cfg: ModelConfig, workload: str) -> dict[str, Any]:
    kw = _sized(SEQ_SIZES, cfg, workload)
    if cfg.d_model is not None:
        kw["width"] = cfg.d_model
    if cfg.n_layers is not None:
        kw["n_layers"] = cfg.n_layers
    return kw


def build_lstm(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    kw = _seq_kw(cfg, "lstm")
    return LSTMForecaster(n_features, n_horizons, hidden=kw["width"], n_layers=kw["n_layers"],
                          dropout=cfg.dropout, n_quantiles=_n_quantiles(cfg))


def build_tcn(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    kw = _seq_kw(cfg, "tcn")
    return TCNForecaster(n_features, n_horizons, width=kw["width"], n_layers=kw["n_layers"] + 2,
                         dropout=cfg.dropout, n_quantiles=_n_quantiles(cfg))


def build_deeplob(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    kw = _seq_kw(cfg, "deeplob")
    return DeepLOBForecaster(n_features, n_horizons, channels=kw["width"] // 2, hidden=kw["width"],
                             n_quantiles=_n_quantiles(cfg))


def build_token_lm(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    """n_features is the vocabulary size (see stride.data.tokens)."""
    kw = _sized(TRANSFORMER_SIZES, cfg, "token_lm")
    for key in ("d_model", "n_layers", "n_heads", "ffn_mult"):
        if getattr(cfg, key) is not None:
            kw[key] = getattr(cfg, key)
    return TokenLM(n_features, seq_len, dropout=cfg.dropout, **kw)


Builder = Callable[[ModelConfig, int, int, int], nn.Module]
WORKLOADS: dict[str, Builder] = {
    "ts_transformer": build_ts_transformer, "mlp": build_mlp, "lstm": build_lstm, "tcn": build_tcn,
    "deeplob": build_deeplob, "token_lm": build_token_lm,
}


def load_factory(spec: str, key: str) -> Callable[..., Any]:
    """Import `package.module:function` named at config key `key`."""
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise ConfigError(f"`{key}` = {spec!r} must be `module:factory`")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ConfigError(f"`{key}` = {spec!r}: cannot import module {mod_name!r}: {exc} (make its package importable: "
                          "`pip install -e DIR` of its project, or PYTHONPATH=DIR holding the package)") from exc
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise ConfigError(f"`{key}` = {spec!r}: {mod_name!r} has no callable {attr!r}")
    return fn


def build_model(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    """A registered workload, or a user factory called as factory(n_features=, seq_len=, n_horizons=, **kwargs)."""
    if ":" in cfg.name:
        model = load_factory(cfg.name, "model.name")(
            n_features=n_features, seq_len=seq_len, n_horizons=n_horizons, **cfg.kwargs
        )
        if not isinstance(model, nn.Module):
            raise ConfigError(f"`model.name` = {cfg.name!r} returned {type(model).__name__}, not an nn.Module")
        return model
    if cfg.name not in WORKLOADS:
        raise ConfigError(
            f"`model.name` = {cfg.name!r} is not a workload{suggest(cfg.name, list(WORKLOADS))}; "
            f"workloads are {', '.join(WORKLOADS)}, or give `module:factory`"
        )
    return WORKLOADS[cfg.name](cfg, n_features, seq_len, n_horizons)
