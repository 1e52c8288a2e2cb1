"""A data source stride builds from the config: `data.source = "mypkg.data:build"`.

stride calls `build(cfg=, batch_size=, **data.kwargs)`: `cfg` is the run's `[data]` section (a
stride.config DataConfig: seq_len, horizons, n_assets, n_steps, seed, val_fraction, embargo) and
`batch_size` is the global batch (`train.batch_size`). It returns a `stride.data.DataBundle`:

- `train`: an iterable of global batches `(x, y)`, x of shape [B, seq_len, n_features] and y of
  shape [B, len(horizons)], iterated once per epoch. A `set_epoch(epoch)` method, if present, is called
  before each epoch; the same epoch must give the same batches, so a resumed run replays to where it
  stopped. Under data parallelism every rank gets the global batch and keeps its own slice of it.
- `val`: the same for validation (or None), iterated whole at each validation.
- `n_features`, `seq_len`, `n_horizons`: the shapes the model is built for.

This one simulates, per asset, log returns with some momentum (an AR(1) process with slowly varying
volatility), so a model has something to learn: the inputs are each step's return and its squared
return, and the targets the sum of the next h returns for each h in `data.horizons` (scaled to about
unit variance, so no horizon dominates the loss). Replace
`simulate` with reading your own files; the windowing and the chronological split stay the same.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from stride.data import DataBundle


def simulate(n_assets: int, n_steps: int, seed: int, momentum: float) -> np.ndarray:
    """Log returns [n_assets, n_steps]: r_t = momentum * r_{t-1} + vol_t * noise."""
    rng = np.random.default_rng(seed)
    vol = 0.01 * np.exp(0.3 * np.cumsum(rng.normal(0, 0.05, (n_assets, n_steps)), axis=1).clip(-3, 3))
    noise = rng.standard_normal((n_assets, n_steps)) * vol
    r = np.empty_like(noise)
    r[:, 0] = noise[:, 0]
    for t in range(1, n_steps):
        r[:, t] = momentum * r[:, t - 1] + noise[:, t]
    return r


class Windows:
    """Windows ending at `ends` (asset, step) pairs, in batches shuffled by (seed, epoch)."""

    def __init__(self, feats: torch.Tensor, targets: torch.Tensor, ends: torch.Tensor, seq_len: int,
                 batch_size: int, seed: int, shuffle: bool) -> None:
        self.feats, self.targets, self.ends, self.seq_len = feats, targets, ends, seq_len
        self.batch_size, self.seed, self.shuffle, self.epoch = batch_size, seed, shuffle, 0

    def __len__(self) -> int:
        return len(self.ends) // self.batch_size if self.shuffle else -(-len(self.ends) // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = (torch.randperm(len(self.ends), generator=torch.Generator().manual_seed(self.seed * 1009 + self.epoch))
                 if self.shuffle else torch.arange(len(self.ends)))
        steps = torch.arange(-self.seq_len + 1, 1)
        for i in range(len(self)):
            asset, end = self.ends[order[i * self.batch_size:(i + 1) * self.batch_size]].T
            yield self.feats[asset[:, None], end[:, None] + steps], self.targets[asset, end]


def build(cfg, batch_size: int, momentum: float = 0.3) -> DataBundle:  # noqa: ANN001 (a stride DataConfig)
    """Training windows from the first (1 - val_fraction) of the steps, validation from the rest."""
    r = simulate(cfg.n_assets, cfg.n_steps, cfg.seed, momentum)
    feats = torch.from_numpy(np.stack([r / 0.01, (r / 0.01) ** 2], axis=-1)).float()  # [A, N, 2], scaled to ~1
    max_h, t = max(cfg.horizons), cfg.seq_len
    csum = np.concatenate([np.zeros((cfg.n_assets, 1)), np.cumsum(r, axis=1)], axis=1)
    steps = np.arange(cfg.n_steps)
    fwd = [csum[:, np.minimum(steps + 1 + h, cfg.n_steps)] - csum[:, steps + 1] for h in cfg.horizons]
    scale = 0.01 * np.sqrt(np.asarray(cfg.horizons, dtype=np.float64))  # each horizon's target to ~unit variance
    targets = torch.from_numpy(np.stack(fwd, axis=-1) / scale).float()  # [A, N, H]: the next h returns, summed
    first, last = t - 1, cfg.n_steps - max_h  # a window needs t steps of history and max_h steps ahead
    span = last - first
    split = first + int(span * (1 - cfg.val_fraction - cfg.test_fraction))
    # `embargo` rows (-1: max_h) between the last row a training target uses (split - 1 + max_h) and the first
    # validation window end, as config.md defines it: no validation target shares a row with a training one
    val_lo = split + max_h + (max_h if cfg.embargo < 0 else cfg.embargo)
    val_hi = first + int(span * (1 - cfg.test_fraction))  # test_fraction of the time after validation held out

    def ends(lo: int, hi: int) -> torch.Tensor:
        a, e = torch.meshgrid(torch.arange(cfg.n_assets), torch.arange(lo, hi), indexing="ij")
        return torch.stack([a.flatten(), e.flatten()], dim=1)

    train_ends, val_ends = ends(first, split), ends(val_lo, val_hi)
    if len(train_ends) < batch_size or len(val_ends) == 0:
        raise ValueError(f"mypkg.data: {cfg.n_assets} assets x {cfg.n_steps} steps give {len(train_ends)} training "
                         f"windows, fewer than batch size {batch_size}; raise data.n_steps")
    train = Windows(feats, targets, train_ends, t, batch_size, cfg.seed, shuffle=True)
    val = Windows(feats, targets, val_ends, t, batch_size, cfg.seed, shuffle=False)
    return DataBundle(train, val, n_features=2, seq_len=t, n_horizons=len(cfg.horizons))
