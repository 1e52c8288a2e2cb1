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
from stride.data.splits import GROW_SPLIT, VALIDATION_NEEDED
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


def synthetic_split(cfg: DataConfig, n_steps: int | None = None) -> tuple[tuple[int, int], int, int]:
    """Window ends of the synthetic source: train [first, split), validation [val_lo, val_hi); a window ending at e
    reads rows e - seq_len + 1 .. e and its targets rows e + 1 .. e + max_h.

    As the store source (splits.py) and config.md say: `embargo` rows (-1: the largest horizon) lie between the last
    row a training target uses and the first validation window end, and `test_fraction` of the time after
    validation is held out (validation targets stay before it; the trainer never reads it). Until 2026-12-05 the
    embargo was counted from the last training window end, so `embargo < max_h` let validation targets share rows
    with training targets (embargo 0: 152 of 6,488 quick-start validation windows), and test_fraction was ignored
    (the "held-out" test period was validation; audit 9, #1 and #2). `n_steps`: in place of `cfg.n_steps`."""
    t, max_h = cfg.seq_len, max(cfg.horizons)
    n = cfg.n_steps if n_steps is None else n_steps
    first, last = t - 1, n - max_h  # window ends with a full history and a full target
    span = last - first
    split = first + int(span * (1 - cfg.val_fraction - cfg.test_fraction))
    embargo = max_h if cfg.embargo < 0 else cfg.embargo
    val_lo = split + max_h + embargo  # split - 1 + max_h: the last row a training target uses
    val_hi = first + int(span * (1 - cfg.test_fraction))  # the test windows would follow, as validation follows train
    return (first, split), val_lo, val_hi


SCAN_STEPS = 1 << 17  # the most step counts _least_n_steps tries one by one


def _window_counts(cfg: DataConfig, n_steps: int | None = None) -> tuple[int, int, int]:
    """Window ends per asset of the synthetic source's (train, validation, test) splits; 0 where a split is empty
    (the test split: where `test_fraction` is 0 too). `n_steps`: in place of `cfg.n_steps`."""
    max_h, n = max(cfg.horizons), cfg.n_steps if n_steps is None else n_steps
    (first, split), val_lo, val_hi = synthetic_split(cfg, n)
    test_lo = val_hi + max_h + (max_h if cfg.embargo < 0 else cfg.embargo)  # as validation follows training
    test = n - max_h - test_lo if cfg.test_fraction > 0 else 0
    return max(split - first, 0), max(val_hi - val_lo, 0), max(test, 0)


def _fits(cfg: DataConfig, batch_size: int, validation: bool | None, n_steps: int | None = None) -> bool:
    """Every split the run reads has a window; training has a batch of them (over all assets)."""
    train, val, test = _window_counts(cfg, n_steps)
    return (cfg.n_assets * train >= batch_size and (val > 0 or validation is False)
            and (test > 0 or cfg.test_fraction == 0))


def _least_n_steps(cfg: DataConfig, batch_size: int, validation: bool | None) -> int | None:
    """The least `data.n_steps` above the config's at which every split fits; None: none below 2**40 steps.
    Arithmetic on the splits' bounds only (nothing is generated). The fit is monotone in n_steps only up to the
    rounding of the fractions, so a bisection finds a step count that fits and a scan below it the least one."""
    hi = max(cfg.n_steps, 1) * 2
    while not _fits(cfg, batch_size, validation, hi):
        hi *= 2
        if hi > 1 << 40:
            return None
    lo = cfg.n_steps
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _fits(cfg, batch_size, validation, mid) else (mid, hi)
    if hi - cfg.n_steps <= SCAN_STEPS:  # a few thousand steps in practice: milliseconds
        return next(n for n in range(cfg.n_steps + 1, hi + 1) if _fits(cfg, batch_size, validation, n))
    return hi


def synthetic_split_problem(cfg: DataConfig, batch_size: int, validation: bool | None = None) -> str | None:
    """Why the synthetic source's splits cannot serve the run, naming the split and what would make it fit; None:
    they can. `validation` False: the run never validates, so an empty validation split is no reason to refuse;
    None: not known (the caller builds the split in any case)."""
    if _fits(cfg, batch_size, validation):
        return None
    t, max_h, a = cfg.seq_len, max(cfg.horizons), cfg.n_assets
    train, val, _ = _window_counts(cfg)
    embargo = max_h if cfg.embargo < 0 else cfg.embargo
    shape = (f"{cfg.n_steps} steps with seq_len={t}, horizons up to {max_h}, val_fraction={cfg.val_fraction}, "
             f"test_fraction={cfg.test_fraction} and embargo={cfg.embargo}"
             + (f" ({embargo} rows)" if cfg.embargo < 0 else ""))
    need = _least_n_steps(cfg, batch_size, validation)
    steps = f"raise data.n_steps to at least {need}" if need is not None else "raise data.n_steps"
    if a * train < batch_size:
        if train <= 0:
            why = f"no training window (one needs seq_len + the largest horizon = {t + max_h} steps, and "
            why += "validation and test their share after it)"
        else:
            why = (f"{train} window ends per asset x {a} assets = {a * train} windows, fewer than batch size "
                   f"{batch_size}")
        other = "data.seq_len" if train <= 0 else "train.batch_size"
        return (f"[data]: the training split is too small: {shape} leave {why}; {steps}, or lower {other}, "
                f"data.val_fraction or data.test_fraction")
    if val == 0 and validation is not False:
        (_, split), val_lo, val_hi = synthetic_split(cfg)
        fixes = [steps]
        room = val_hi - split - max_h - 1  # the largest embargo that leaves a validation window end
        if room >= 0:
            fixes.append(f"set data.embargo to {room} or less (now {embargo} rows)")
        fixes.append("raise data.val_fraction")
        why = VALIDATION_NEEDED if validation is None else ""
        return (f"[data]: the validation split is empty: {shape} leave {train} training window ends per asset x "
                f"{a} assets, but the first validation window end, step {val_lo} (after the last training target's "
                f"{max_h} steps and the embargo's {embargo}), is past the last one its share of the time allows, "
                f"step {val_hi - 1}; {', '.join(fixes[:-1])} or {fixes[-1]}{why}")
    # the test split is empty (the store source refuses this too)
    return (f"[data]: the test split is empty: test_fraction={cfg.test_fraction} of {shape} holds no test "
            f"window after the embargo; {steps} or raise data.test_fraction")


def build_synthetic(cfg: DataConfig, batch_size: int, device: torch.device | None = None, *,
                    validation: bool | None = None) -> DataBundle:
    """The synthetic market's loaders; its splits are checked first (nothing is generated for a refused config).
    `validation` False: an empty validation split is allowed and `val` is then None (see build_data)."""
    problem = synthetic_split_problem(cfg, batch_size, validation)
    if problem is not None:
        raise ConfigError(problem)
    series = generate_market(cfg.n_assets, cfg.n_steps, cfg.seed)
    targets = forward_targets(series.returns, cfg.horizons, series.vol)
    t = cfg.seq_len
    (first, split), val_lo, val_hi = synthetic_split(cfg)
    feats, tgt = torch.from_numpy(series.features), torch.from_numpy(targets)
    source = ArrayWindows(feats, tgt, window_ends(cfg.n_assets, first, split), t)
    train, info = train_loader(cfg, source, batch_size, device or torch.device("cpu"))
    val = WindowBatches(
        feats, tgt, window_ends(cfg.n_assets, val_lo, val_hi), t, batch_size,
        seed=cfg.seed + 1, drop_last=False, stateful=False, pin_memory=cfg.pin_memory,
    ) if val_hi > val_lo else None
    return DataBundle(train, val, feats.shape[-1], t, len(cfg.horizons), info)


def build_store(cfg: DataConfig, batch_size: int, device: torch.device | None = None, *,
                validation: bool | None = None) -> DataBundle:
    """The store's loaders. `validation` False: an empty validation split is allowed and `val` is then None."""
    from stride.data.splits import build_store_sources

    src = build_store_sources(cfg, validation=validation)
    if len(src.train) < batch_size:
        raise ConfigError(f"[data]: the train split of {cfg.store} has {len(src.train)} windows, fewer than "
                          f"batch size {batch_size}; lower train.batch_size, or {GROW_SPLIT['train']}, or use a "
                          "store with more rows")
    train, info = train_loader(cfg, src.train, batch_size, device or torch.device("cpu"), cfg.store)
    val = None
    if len(src.val):
        if not info["device_resident"]:  # validation copies as the probe chose for training
            src.val.configure_gather(1, **copy_settings(info))
        val = ShardedLoader(src.val, batch_size, seed=cfg.seed + 1, drop_last=False, stateful=False,
                            pin_memory=cfg.pin_memory)
    return DataBundle(train, val, src.n_features, cfg.seq_len, len(cfg.horizons), info)


def build_data(cfg: DataConfig, batch_size: int, device: torch.device | None = None, *,
               validation: bool | None = None) -> DataBundle:
    """The run's data for training on `device` (default: the CPU).

    `validation`: whether the run validates (`train.val_every` > 0). False: a built-in source whose validation
    split is empty is not refused for it, and its bundle's `val` is None (the trainer skips validation without
    data). None (not said) or True: an empty validation split is refused, naming what would make it fit. A
    `module:factory` source is called as it always was."""
    if cfg.source == "synthetic":
        return build_synthetic(cfg, batch_size, device, validation=validation)
    if cfg.source == "store":
        return build_store(cfg, batch_size, device, validation=validation)
    if ":" in cfg.source:
        return call_factory(cfg.source, "data.source", DataBundle, cfg=cfg, batch_size=batch_size, **cfg.kwargs)
    raise ConfigError(f"`data.source` = {cfg.source!r}: expected `synthetic`, `store` or `module:factory`")
