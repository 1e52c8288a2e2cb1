"""Build train/validation batch sources from `[data]`: synthetic market, an ingested store, or `module:factory`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from stride.config.errors import ConfigError
from stride.config.plugins import call_factory
from stride.config.schema import DataConfig
from stride.data.loader import ShardedLoader
from stride.data.synthetic import forward_targets, generate_market
from stride.data.windows import WindowBatches, window_ends


@dataclass
class DataBundle:
    train: Any  # iterable of (x, y) global batches; may have set_epoch / state_dict / shard
    val: Any | None
    n_features: int
    seq_len: int
    n_horizons: int


def build_synthetic(cfg: DataConfig, batch_size: int) -> DataBundle:
    series = generate_market(cfg.n_assets, cfg.n_steps, cfg.seed)
    targets = forward_targets(series.returns, cfg.horizons, series.vol)
    t, max_h = cfg.seq_len, max(cfg.horizons)
    first, last = t - 1, cfg.n_steps - max_h  # window ends with a full history and a full target
    split = first + int((last - first) * (1 - cfg.val_fraction))
    # Embargo of max_h steps by default: no training target overlaps a validation window's target.
    val_lo = split + (max_h if cfg.embargo < 0 else cfg.embargo)
    if split - first < batch_size or last - val_lo <= 0:
        raise ConfigError(
            f"[data]: {cfg.n_steps} steps with seq_len={t}, horizons up to {max_h} and "
            f"val_fraction={cfg.val_fraction} leave too few windows for batch size {batch_size}; raise data.n_steps"
        )
    feats, tgt = torch.from_numpy(series.features), torch.from_numpy(targets)
    pin = cfg.pin_memory
    train = WindowBatches(feats, tgt, window_ends(cfg.n_assets, first, split), t, batch_size, seed=cfg.seed,
                          prefetch=cfg.prefetch, pin_memory=pin)
    val = WindowBatches(
        feats, tgt, window_ends(cfg.n_assets, val_lo, last), t, batch_size,
        seed=cfg.seed + 1, drop_last=False, stateful=False, pin_memory=pin,
    )
    return DataBundle(train, val, feats.shape[-1], t, len(cfg.horizons))


def build_store(cfg: DataConfig, batch_size: int) -> DataBundle:
    from stride.data.splits import build_store_sources

    src = build_store_sources(cfg)
    if len(src.train) < batch_size:
        raise ConfigError(f"[data]: the train split of {cfg.store} has {len(src.train)} windows, fewer than "
                          f"batch size {batch_size}")
    train = ShardedLoader(src.train, batch_size, seed=cfg.seed, prefetch=cfg.prefetch, pin_memory=cfg.pin_memory)
    val = ShardedLoader(src.val, batch_size, seed=cfg.seed + 1, drop_last=False, stateful=False,
                        pin_memory=cfg.pin_memory)
    return DataBundle(train, val, src.n_features, cfg.seq_len, len(cfg.horizons))


def build_data(cfg: DataConfig, batch_size: int) -> DataBundle:
    if cfg.source == "synthetic":
        return build_synthetic(cfg, batch_size)
    if cfg.source == "store":
        return build_store(cfg, batch_size)
    if ":" in cfg.source:
        return call_factory(cfg.source, "data.source", DataBundle, cfg=cfg, batch_size=batch_size, **cfg.kwargs)
    raise ConfigError(f"`data.source` = {cfg.source!r}: expected `synthetic`, `store` or `module:factory`")
