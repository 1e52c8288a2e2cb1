"""The transformer workloads: ts_transformer (forecasting) and token_lm (next token), sizes and builders."""

from __future__ import annotations

from typing import Any

from torch import nn

from stride.config.errors import ConfigError, first_few
from stride.config.schema import ModelConfig
from stride.models.transformer.layers import FFN_MULT, ffn_hidden
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
    """The size's row amended by the override keys, checked for both transformers alike (token_lm was not: heads of
    odd size built and ran, RoPE broadcasting the odd element into a made-up pair)."""
    kw = sized(SIZES, cfg, workload)
    kw.update({key: getattr(cfg, key) for key in OVERRIDES if getattr(cfg, key) is not None})
    d, heads = kw["d_model"], kw["n_heads"]
    if d % heads or (d // heads) % 2:
        raise ConfigError(
            f"`model.d_model` = {d} must split into `model.n_heads` = {heads} heads of even size (RoPE rotates "
            f"pairs): set `model.n_heads` to one of {_even_head_counts(d)}, or `model.d_model` to a multiple of "
            f"{2 * heads}"
        )
    mult = kw.get("ffn_mult", FFN_MULT)
    if ffn_hidden(mult, d) < 8:
        raise ConfigError(
            f"`model.ffn_mult` = {mult:g} with `model.d_model` = {d} gives the SwiGLU a hidden size of "
            f"{ffn_hidden(mult, d)} (ffn_mult x d_model rounded to a multiple of 8): an MLP of no width; set "
            f"`model.ffn_mult` >= {8 / d:.4g} (hidden size 8) or leave it unset (8/3)"
        )
    return kw


def _even_head_counts(d_model: int) -> str:
    """Head counts that split d_model into heads of even size (at most 6 shown)."""
    ok = [h for h in range(1, d_model // 2 + 1) if d_model % h == 0 and (d_model // h) % 2 == 0]
    return first_few(ok, 6) if ok else "none (d_model is odd)"


def build_ts_transformer(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    kw = _kwargs(cfg, "ts_transformer")
    return TimeSeriesTransformer(
        n_features, seq_len, n_horizons, patch_len=cfg.patch_len, causal=cfg.causal,
        dropout=cfg.dropout, n_quantiles=n_quantiles(cfg), **kw,
    )


def build_token_lm(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    """n_features is the vocabulary size (see stride.data.tokens)."""
    return TokenLM(n_features, seq_len, dropout=cfg.dropout, **_kwargs(cfg, "token_lm"))
