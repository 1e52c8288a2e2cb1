"""Time splits of a store into train/validation/test window sources, with an embargo, per symbol run.

The cut times are quantiles of all rows' timestamps (so overnight gaps do not count), the same for
every symbol. A window ending
at row e belongs to a split when e does; its history may reach back before the split (that is the
past), but its target (rows e+1..e+h) never crosses into the next split. The first validation end
is `embargo` rows after the last row any training target uses. With `normalize = "rolling"`, no
window reads a symbol's warm-up rows (its first `normalize_window - 1`, whose statistics window is
still short): the first window of a symbol starts at its row `normalize_window - 1`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from stride.config.errors import ConfigError
from stride.config.schema import DataConfig
from stride.data.normalize import NonFiniteFeature, derived_features, train_stats
from stride.data.store import Store, StoreError, open_store
from stride.data.windows import RowWindows

DAY_NS = 86_400 * 10**9

log = logging.getLogger("stride.data")


@dataclass
class StoreSources:
    train: RowWindows
    val: RowWindows
    test: RowWindows | None
    n_features: int
    ranges: dict[str, np.ndarray]  # end-row ranges per split, for inspection and tests


def runs(store: Store, cross_days: bool) -> list[tuple[int, int]]:
    """Row runs windows may not cross: one per symbol, split at day changes unless `cross_days`."""
    out: list[tuple[int, int]] = []
    for lo, hi in zip(*store.segments(), strict=True):
        lo, hi = int(lo), int(hi)
        if cross_days:
            out.append((lo, hi))
            continue
        cuts = [lo]
        for a in range(lo, hi, 1 << 22):  # chunked: the timestamps are read, never held whole
            b = min(hi, a + (1 << 22) + 1)
            day = store.timestamps[a:b] // DAY_NS
            cuts.extend((a + 1 + np.flatnonzero(np.diff(day))).tolist())
        cuts.append(hi)
        out.extend(zip(cuts[:-1], cuts[1:], strict=True))
    return out


def time_quantile(store: Store, q: float, n: int = 1 << 16) -> int:
    """The time by which a fraction q of all rows has happened (from an even sample of rows)."""
    rows = np.unique(np.linspace(0, store.n_rows - 1, min(n, store.n_rows)).astype(np.int64))
    return int(np.quantile(np.sort(store.timestamps[rows]), q, method="nearest"))


def split_ranges(store: Store, cfg: DataConfig) -> dict[str, np.ndarray]:
    """End-row ranges [K, 2] for train, val and test."""
    t, max_h = cfg.seq_len, max(cfg.horizons)
    embargo = max_h if cfg.embargo < 0 else cfg.embargo
    cut_val = time_quantile(store, 1 - cfg.val_fraction - cfg.test_fraction)
    cut_test = time_quantile(store, 1 - cfg.test_fraction) if cfg.test_fraction > 0 else np.iinfo(np.int64).max
    row_runs = runs(store, cfg.cross_days)
    longest = max(hi - lo for lo, hi in row_runs)
    if t + max_h > longest:
        where = "" if cfg.cross_days else " (runs end at day boundaries; set data.cross_days = true to join days)"
        raise ConfigError(f"[data]: a window of seq_len={t} plus horizon {max_h} rows is longer than the longest "
                          f"series run in {store.path}: {longest} rows{where}")
    out: dict[str, list[tuple[int, int]]] = {"train": [], "val": [], "test": []}
    starts, stops = store.segments()
    k_val_by_seg = {int(lo): int(lo) + int(np.searchsorted(store.timestamps[lo:hi], cut_val)) for lo, hi in
                    zip(starts, stops, strict=True)}
    k_test_by_seg = {int(lo): int(lo) + int(np.searchsorted(store.timestamps[lo:hi], cut_test)) for lo, hi in
                     zip(starts, stops, strict=True)}
    seg_of = np.asarray(starts)
    warmup = cfg.normalize_window - 1 if cfg.normalize == "rolling" else 0
    for a, b in row_runs:
        s = int(seg_of[np.searchsorted(seg_of, a, side="right") - 1])
        kv, kt, seg_stop = k_val_by_seg[s], k_test_by_seg[s], int(stops[np.searchsorted(seg_of, s)])
        first = max(a, s + warmup) + t - 1  # full history, none of it in the symbol's warm-up
        out["train"].append((first, min(b, kv) - max_h))
        out["val"].append((max(first, kv + embargo), min(b, kt) - max_h))
        if cfg.test_fraction > 0:
            out["test"].append((max(first, kt + embargo), min(b, seg_stop) - max_h))
    res = {}
    for k, v in out.items():
        arr = np.asarray(v, dtype=np.int64).reshape(-1, 2)
        res[k] = arr[arr[:, 1] > arr[:, 0]]
    return res


OPEN_NAMES = {"open", "o", "open_price", "opening_price", "price_open", "px_open", "open_px"}


def _names_an_open(column: str) -> bool:
    """Whether a column's name says it holds each bar's opening price (`Open`, `open_price`, `PX_OPEN`, ...)."""
    return column.strip().lower().replace(" ", "_").replace("-", "_") in OPEN_NAMES


def _count(r: np.ndarray) -> int:
    return int((r[:, 1] - r[:, 0]).sum()) if len(r) else 0


def _named(key: str, fn, *args):
    """fn(*args), a StoreError naming the config key that led to it (`data.store`, `data.columns`, ...)."""
    try:
        return fn(*args)
    except StoreError as exc:
        raise StoreError(f"`{key}`: {exc}") from None


# Said where the validation split is empty and the caller did not say whether the run validates (`validation`
# None): the data is built before, and apart from, `train.val_every`.
VALIDATION_NEEDED = (" (validation windows are needed even with train.val_every = 0: the data is built from [data] "
                     "alone, which does not say whether the run validates)")
# What makes each split of a store larger, beside a longer store.
GROW_SPLIT = {"train": "lower data.val_fraction, data.test_fraction or data.seq_len",
              "val": "raise data.val_fraction, or lower data.embargo or data.seq_len",
              "test": "raise data.test_fraction, or lower data.embargo or data.seq_len"}


def build_store_sources(cfg: DataConfig, store: Store | None = None, *,
                        validation: bool | None = None) -> StoreSources:
    """The store's train / validation / test window sources. `validation` False: the run never validates, so an
    empty validation split is allowed (its source then has no window); None or True: refused, as an empty train
    split (and an empty test split with `test_fraction` > 0) always is."""
    store = store or _named("data.store", open_store, cfg.store)
    cols = [_named("data.columns", store.column, c) for c in cfg.columns] if cfg.columns else \
        list(range(len(store.columns)))
    price = store.values[:, _named("data.target_column", store.column, cfg.target_column)]
    if price.dtype == torch.bfloat16:
        # bf16 keeps 8 significant bits: from 64 to 128 its values are 0.5 apart, so most one-bar moves round
        # away and h=1 log returns are exactly 0 (69 % in audit 9 #5); features survive bf16, targets do not
        log.warning("stride: target column %r of %s is bfloat16: most short-horizon targets (log returns of it) "
                    "round to exactly 0; ingest the price column as float32 (`stride data ingest` without "
                    "--dtype bfloat16)", cfg.target_column, store.path)
    feature_names = [store.columns[c] for c in cols]
    if _names_an_open(cfg.target_column) and any(n != cfg.target_column for n in feature_names):
        # a bar's open is seen at its start, its other columns (close, high, low, volume) at its end: the target's
        # first leg, open -> close of the window's last bar, is in the window (S&P 500 daily, h=1: validation R^2
        # 0.81 from log close/open of that bar alone, 0.00 with the close as target; outside audit 37)
        log.warning("stride: target column %r of %s looks like each bar's open: a target log p[e+h] - log p[e] then "
                    "starts at the open of the window's last bar, whose later values (%s) the window holds, so the "
                    "window already shows part of the target; use a price seen at the bar's end (its close or mid)",
                    cfg.target_column, store.path, ", ".join(n for n in feature_names if n != cfg.target_column))
    ranges = split_ranges(store, cfg)
    warm = (f", normalize_window={cfg.normalize_window}: the first {cfg.normalize_window - 1} rows of each symbol "
            "are rolling warm-up" if cfg.normalize == "rolling" else "")
    needed = ("train",) + (("val",) if validation is not False else ()) + (("test",) if cfg.test_fraction > 0 else ())
    for name in needed:
        if _count(ranges[name]) == 0:
            grow = GROW_SPLIT[name] + (", or lower data.normalize_window" if warm else "")
            note = VALIDATION_NEEDED if name == "val" and validation is None else ""
            raise ConfigError(f"[data]: the {name} split of {store.path} is empty (seq_len={cfg.seq_len}, "
                              f"horizons={cfg.horizons}, val_fraction={cfg.val_fraction}, "
                              f"test_fraction={cfg.test_fraction}, embargo={cfg.embargo}{warm}); {grow}, or use "
                              f"a store with more rows{note}")
    sha = store.manifest["files"]["values.bin"]["sha256"]
    # Rows the training windows read (history included): the split's rows only, never later ones.
    train_rows = [(int(lo) - cfg.seq_len + 1, int(hi)) for lo, hi in ranges["train"]]
    all_cols = cols == list(range(len(store.columns)))
    shift = scale = None
    if cfg.batch_dtype == "bfloat16":
        # bf16 batches: every normalisation is baked into a bf16 file (train statistics too), so the
        # loader only copies half the bytes; each value is the float32 path's value rounded to bf16.
        if cfg.normalize == "none" and all_cols and store.values.dtype == torch.bfloat16:
            fmap = store.values_map  # zero copy: windows index the bf16 store's own memory map
        else:
            mode, stats = cfg.normalize if cfg.normalize != "none" else "select", {}
            if mode == "train":
                shift, scale = _fitted(store, cols, store.values, train_rows, cols)
                stats = {"shift": shift, "scale": scale}
            fmap = derived_features(store.values, Path(store.path), sha, cols, store.segments(), mode,
                                    cfg.normalize_window, dtype="bfloat16", **stats)
            shift = scale = None  # applied in the file
        feats = torch.from_numpy(fmap).view(torch.bfloat16)
    elif cfg.normalize in ("expanding", "rolling"):
        fmap = derived_features(store.values, Path(store.path), sha, cols, store.segments(), cfg.normalize,
                                cfg.normalize_window)
        feats = torch.from_numpy(fmap)
    elif not all_cols or store.values.dtype != torch.float32:
        fmap = derived_features(store.values, Path(store.path), sha, cols, store.segments(), "select")
        feats = torch.from_numpy(fmap)
    else:
        fmap, feats = store.values_map, store.values  # zero copy: windows index the store's own memory map
    if cfg.normalize == "train" and cfg.batch_dtype == "float32":
        shift, scale = _fitted(store, cols, feats, train_rows)
    batch_dtype = torch.bfloat16 if cfg.batch_dtype == "bfloat16" else torch.float32

    def make(r: np.ndarray, tscale: torch.Tensor | None = None) -> RowWindows:
        return RowWindows(feats, price, r, cfg.seq_len, cfg.horizons, shift=shift, scale=scale, target_scale=tscale,
                          feature_map=fmap, price_map=store.values_map, resident_mb=cfg.resident_mb,
                          batch_dtype=batch_dtype,
                          gather_threads=1 if cfg.gather_threads == "auto" else cfg.gather_threads)

    train = make(ranges["train"])
    tscale = target_scale(train, cfg.seed, str(store.path), cfg.target_column)
    train.target_scale = tscale
    return StoreSources(train, make(ranges["val"], tscale),
                        make(ranges["test"], tscale) if cfg.test_fraction > 0 else None, len(cols), ranges)


def _fitted(store: Store, cols: list[int], *args) -> tuple[torch.Tensor, torch.Tensor]:
    """train_stats(*args); a NaN or inf in the training rows is a StoreError naming the column and row."""
    try:
        return train_stats(*args)
    except NonFiniteFeature as exc:
        raise StoreError(f"`data.store`: {store.path}: feature column {store.columns[cols[exc.index]]!r} is NaN or "
                         f"inf at row {exc.row} (training split); ingestion never stores one, so the store changed "
                         f"after it was written: `stride data inspect {store.path} --verify`") from None


def target_scale(train: RowWindows, seed: int, where: str, column: str, n: int = 1 << 15) -> torch.Tensor:
    """1 / std of each horizon's forward log return over (a fixed sample of) training windows.

    Fitted on the train split only; it makes targets order one, as the synthetic source's are.
    """
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, len(train), (min(n, len(train)),), generator=g)
    end = train.end_rows(idx)
    p = train.price[end[:, None] + train.horizons].double()
    if not torch.isfinite(p).all() or (p <= 0).any():
        raise ConfigError(f"[data]: target column {column!r} of {where} has non-positive or non-finite prices; "
                          "targets are log returns of a price column")
    r = p[:, 1:].log() - p[:, :1].log()
    std = r.std(dim=0)
    return torch.where(std > 0, 1.0 / std, torch.ones_like(std)).float()
