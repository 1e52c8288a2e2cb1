"""Discretised-return tokens for the GPT-style workload: each step's volatility-scaled return binned
into `vocab` equal-probability bins (fitted on the training span only), next-token targets."""

from __future__ import annotations

import numpy as np
import torch

from stride.config.errors import ConfigError
from stride.config.schema import DataConfig
from stride.data.build import DataBundle
from stride.data.synthetic import generate_market
from stride.data.tensor_batches import TensorBatches


def return_tokens(cfg: DataConfig, batch_size: int, vocab: int = 64) -> DataBundle:
    """Use as `data.source = "stride.data.tokens:return_tokens"` (`data.kwargs = {vocab = 64}`)."""
    series = generate_market(cfg.n_assets, cfg.n_steps, cfg.seed)
    z = series.features[..., 0]  # returns over causal EWMA volatility, [A, N]
    # train [0, split); `embargo` tokens skipped (-1: 1, the next-token horizon); validation to val_end; the last
    # test_fraction of the steps held out (the trainer never reads it), as the other sources split (audit 9)
    split = int(cfg.n_steps * (1 - cfg.val_fraction - cfg.test_fraction))
    val_lo = split + (1 if cfg.embargo < 0 else cfg.embargo)
    val_end = int(cfg.n_steps * (1 - cfg.test_fraction))
    edges = np.quantile(z[:, :split], np.linspace(0, 1, vocab + 1)[1:-1])  # fitted on train only
    tok = torch.from_numpy(np.searchsorted(edges, z).astype(np.int64))
    t = cfg.seq_len

    def windows(lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
        if hi - lo < t + 1:  # not one window (unfold would raise)
            empty = torch.empty(0, t, dtype=tok.dtype)
            return empty, empty
        w = tok[:, lo:hi].unfold(1, t + 1, t).reshape(-1, t + 1)  # non-overlapping windows
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    xtr, ytr = windows(0, split)
    xva, yva = windows(val_lo, val_end)
    if len(xtr) < batch_size or len(xva) == 0:
        raise ConfigError(f"[data]: {cfg.n_assets} assets x {cfg.n_steps} steps give {len(xtr)} training "
                          f"windows of {t} tokens, fewer than batch size {batch_size}; raise data.n_steps")
    train = TensorBatches(xtr, ytr, batch_size, cfg.seed)
    val = TensorBatches(xva, yva, batch_size, shuffle=False, drop_last=False)  # every validation window
    # n_features carries the vocabulary size to the model builder (token_lm reads it so).
    return DataBundle(train, val, n_features=vocab, seq_len=t, n_horizons=0)
