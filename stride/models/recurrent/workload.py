"""The recurrent and convolutional workloads (lstm, tcn, deeplob): one size table, three builders."""

from __future__ import annotations

from typing import Any

from torch import nn

from stride.config.errors import ConfigError
from stride.config.schema import ModelConfig
from stride.models.recurrent.model import DeepLOBForecaster, LSTMForecaster, TCNForecaster
from stride.models.workload import n_quantiles, sized

SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"width": 32, "n_layers": 2},
    "small": {"width": 64, "n_layers": 3},
    "base": {"width": 128, "n_layers": 4},
    "large": {"width": 256, "n_layers": 6},
}


# tcn's rows: two more blocks than the row above (small: 5 blocks, dilations 1-16, 125 steps of receptive field), so
# that `model.n_layers`, which the docs call the blocks in `model.blocks`, is that count (it built n_layers + 2)
TCN_SIZES: dict[str, dict[str, Any]] = {k: {**row, "n_layers": row["n_layers"] + 2} for k, row in SIZES.items()}


TCN_BLOCKS_SINCE = "2026-12-07"  # from then on tcn builds `model.n_layers` blocks; before, n_layers + 2


def tcn_resume_hint(saved_blocks: int) -> str:
    """For a tcn checkpoint whose blocks are not the model's: how a run saved before `model.n_layers` counted blocks
    resumes (its meta.json records the old n; the config check compares that with the new one, hence the force)."""
    old = f" (`model.n_layers` = {saved_blocks - 2} then)" if saved_blocks > 2 else ""
    return (f"tcn's `model.n_layers` counts its blocks since {TCN_BLOCKS_SINCE} (old n -> n + 2 blocks): a run saved "
            f"before then with these {saved_blocks} blocks{old} resumes with `model.n_layers` = {saved_blocks} and "
            "`checkpoint.force_resume = true`")


def _kwargs(cfg: ModelConfig, workload: str, sizes: dict[str, dict[str, Any]] = SIZES) -> dict[str, Any]:
    kw = sized(sizes, cfg, workload)
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
    kw = _kwargs(cfg, "tcn", TCN_SIZES)
    n = tcn_blocks(cfg, seq_len)
    return TCNForecaster(n_features, n_horizons, width=kw["width"], n_layers=n,
                         dropout=cfg.dropout, n_quantiles=n_quantiles(cfg))


def tcn_blocks(cfg: ModelConfig, seq_len: int) -> int:
    """tcn's block count (`model.n_layers`, or the size row's), refusing blocks dilated past the window. The build
    calls it, and so does stride.models.size, which counts a deep model from builds of 1 and 2 blocks: the pre-launch
    size check returned a size for 11 blocks on a 32-step window that the build then refused (review of 4285274)."""
    n = _kwargs(cfg, "tcn", TCN_SIZES)["n_layers"]
    if 2 ** (n - 1) >= seq_len:
        # block i is dilated 2^i: from 2^i >= seq_len on, every tap but a step's own lands in the left padding, so
        # those blocks are 1x1 convolutions that cost (and count as model FLOPs) k times their work
        most = (seq_len - 1).bit_length()
        fix = f"set `model.n_layers` <= {most}, or" if most else "set"
        raise ConfigError(
            f"`model.n_layers` = {n} tcn blocks are dilated up to 2^{n - 1} = {2 ** (n - 1)} steps, not shorter than "
            f"the window `data.seq_len` = {seq_len}: the blocks from dilation {1 << most} on see no step but their "
            f"own; {fix} `data.seq_len` > {2 ** (n - 1)} (receptive field: {tcn_receptive_field(n)} steps)"
        )
    return n


def tcn_receptive_field(n_layers: int, kernel: int = 3) -> int:
    """Steps a TCN output sees: each block has two convolutions dilated 2^i, each adding (kernel - 1) x 2^i."""
    return 1 + 2 * (kernel - 1) * (2**n_layers - 1)


def build_deeplob(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
    kw = _kwargs(cfg, "deeplob")
    if kw["width"] < 2:  # was torch's "input_size must be greater than zero", from the LSTM, naming no key
        raise ConfigError(f"`model.d_model` = {kw['width']} gives deeplob {kw['width'] // 2} convolution channels "
                          "(d_model // 2; the LSTM's hidden size is d_model): set `model.d_model` >= 2")
    return DeepLOBForecaster(n_features, n_horizons, channels=kw["width"] // 2, hidden=kw["width"],
                             n_quantiles=n_quantiles(cfg))
