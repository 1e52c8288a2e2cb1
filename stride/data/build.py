"""Build train/validation batch sources from `[data]`: synthetic market, an ingested store, or `module:factory`.

The training loader's settings are chosen here for the device the run trains on: the split on the
device (`data.device_resident`, stride.data.device_windows), or the host path with the prefetch,
gather threads and copy kernel the host probe measured (`data.prefetch` / `data.gather_threads` =
"auto", stride.data.probe). What was chosen and why is `DataBundle.loader` (summary.json's `data_loader`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from stride.config.errors import ConfigError
from stride.config.plugins import call_factory
from stride.config.schema import DataConfig
from stride.data.device_windows import DeviceWindows, device_bytes, fits
from stride.data.loader import ShardedLoader
from stride.data.probe import copy_settings, plan_loader
from stride.data.synthetic import forward_targets, generate_market
from stride.data.windows import ArrayWindows, WindowBatches, window_ends


@dataclass
class DataBundle:
    train: Any  # iterable of (x, y) global batches; may have set_epoch / state_dict / shard
    val: Any | None
    n_features: int
    seq_len: int
    n_horizons: int
    loader: dict[str, Any] | None = field(default=None)  # how the training loader was set up, and why


def train_loader(cfg: DataConfig, source: Any, batch_size: int, device: torch.device,
                 store: str | None = None) -> tuple[ShardedLoader, dict[str, Any]]:
    """The training loader over `source` on `device`, and the record of how it was chosen."""
    if cfg.device_resident is True or (cfg.device_resident == "auto" and fits(source, device)[0]):
        why = "set in the config" if cfg.device_resident is True else fits(source, device)[1]
        dev = DeviceWindows(source, device)
        loader = ShardedLoader(dev, batch_size, seed=cfg.seed, prefetch=0, pin_memory=False)
        return loader, {"device_resident": True, "device_resident_reason": why, "device_bytes": device_bytes(source),
                        "prefetch": 0, "gather_threads": 0, "origin": "device",
                        "reasons": {"prefetch": "0: batches are gathered on the device"}}
    why = "set in the config" if cfg.device_resident is False else fits(source, device)[1]
    plan = plan_loader(source, batch_size, device, cfg.prefetch, cfg.gather_threads, store)
    loader = ShardedLoader(source, batch_size, seed=cfg.seed, prefetch=plan.prefetch, pin_memory=cfg.pin_memory)
    return loader, {"device_resident": False, "device_resident_reason": why, **plan.as_dict()}


# How the built-in sources split time into train / validation / test. 2: since 2026-12-05 the synthetic and token
# sources count the embargo from the last training target and hold out test_fraction (audit 9); 1: before. Results
# measured under another version have other validation windows (stride.sweep refuses to mix them in one sweep).
SPLIT_VERSION = 2


def synthetic_split(cfg: DataConfig) -> tuple[tuple[int, int], int, int]:
    """Window ends of the synthetic source: train [first, split), validation [val_lo, val_hi); a window ending at e
    reads rows e - seq_len + 1 .. e and its targets rows e + 1 .. e + max_h.

    As the store source (splits.py) and config.md say: `embargo` rows (-1: the largest horizon) lie between the last
    row a training target uses and the first validation window end, and `test_fraction` of the time after
    validation is held out (validation targets stay before it; the trainer never reads it). Until 2026-12-05 the
    embargo was counted from the last training window end, so `embargo < max_h` let validation targets share rows
    with training targets (embargo 0: 152 of 6,488 quick-start validation windows), and test_fraction was ignored
    (the "held-out" test period was validation; audit 9, #1 and #2)."""
    t, max_h = cfg.seq_len, max(cfg.horizons)
    first, last = t - 1, cfg.n_steps - max_h  # window ends with a full history and a full target
    span = last - first
    split = first + int(span * (1 - cfg.val_fraction - cfg.test_fraction))
    embargo = max_h if cfg.embargo < 0 else cfg.embargo
    val_lo = split + max_h + embargo  # split - 1 + max_h: the last row a training target uses
    val_hi = first + int(span * (1 - cfg.test_fraction))  # the test windows would follow, as validation follows train
    return (first, split), val_lo, val_hi


def build_synthetic(cfg: DataConfig, batch_size: int, device: torch.device | None = None) -> DataBundle:
    series = generate_market(cfg.n_assets, cfg.n_steps, cfg.seed)
    targets = forward_targets(series.returns, cfg.horizons, series.vol)
    t, max_h = cfg.seq_len, max(cfg.horizons)
    train_ends, val_lo, val_hi = synthetic_split(cfg)
    if train_ends[1] - train_ends[0] < batch_size or val_hi - val_lo <= 0:
        raise ConfigError(
            f"[data]: {cfg.n_steps} steps with seq_len={t}, horizons up to {max_h}, val_fraction={cfg.val_fraction}, "
            f"test_fraction={cfg.test_fraction} and embargo={cfg.embargo} leave too few windows for batch size "
            f"{batch_size}; raise data.n_steps"
        )
    test_lo = val_hi + max_h + (max_h if cfg.embargo < 0 else cfg.embargo)  # as validation follows training
    if cfg.test_fraction > 0 and cfg.n_steps - max_h - test_lo <= 0:  # the store source refuses this too
        raise ConfigError(f"[data]: test_fraction={cfg.test_fraction} of {cfg.n_steps} steps holds no test window "
                          f"after the embargo; raise data.n_steps or data.test_fraction")
    first, split = train_ends
    feats, tgt = torch.from_numpy(series.features), torch.from_numpy(targets)
    source = ArrayWindows(feats, tgt, window_ends(cfg.n_assets, first, split), t)
    train, info = train_loader(cfg, source, batch_size, device or torch.device("cpu"))
    val = WindowBatches(
        feats, tgt, window_ends(cfg.n_assets, val_lo, val_hi), t, batch_size,
        seed=cfg.seed + 1, drop_last=False, stateful=False, pin_memory=cfg.pin_memory,
    )
    return DataBundle(train, val, feats.shape[-1], t, len(cfg.horizons), info)


def build_store(cfg: DataConfig, batch_size: int, device: torch.device | None = None) -> DataBundle:
    from stride.data.splits import build_store_sources

    src = build_store_sources(cfg)
    if len(src.train) < batch_size:
        raise ConfigError(f"[data]: the train split of {cfg.store} has {len(src.train)} windows, fewer than "
                          f"batch size {batch_size}")
    train, info = train_loader(cfg, src.train, batch_size, device or torch.device("cpu"), cfg.store)
    if not info["device_resident"]:  # validation copies as the probe chose for training
        src.val.configure_gather(1, **copy_settings(info))
    val = ShardedLoader(src.val, batch_size, seed=cfg.seed + 1, drop_last=False, stateful=False,
                        pin_memory=cfg.pin_memory)
    return DataBundle(train, val, src.n_features, cfg.seq_len, len(cfg.horizons), info)


def build_data(cfg: DataConfig, batch_size: int, device: torch.device | None = None) -> DataBundle:
    """The run's data for training on `device` (default: the CPU)."""
    if cfg.source == "synthetic":
        return build_synthetic(cfg, batch_size, device)
    if cfg.source == "store":
        return build_store(cfg, batch_size, device)
    if ":" in cfg.source:
        return call_factory(cfg.source, "data.source", DataBundle, cfg=cfg, batch_size=batch_size, **cfg.kwargs)
    raise ConfigError(f"`data.source` = {cfg.source!r}: expected `synthetic`, `store` or `module:factory`")
