"""Feature normalisation that only uses the past: expanding or rolling statistics per symbol, or train-split fits.

`expanding`: each row is z-scored with the mean and std of its symbol's rows up to and including it.
`rolling`: the same over the last `window` rows of its symbol (fewer in the first window-1 rows, the
warm-up, which `splits` keeps out of every window). Both are written once as a derived float32
memory map next to the store (in the user's cache folder where the store cannot be written), chunk by
chunk (float64 memory is one chunk, never the series).
`train`: one mean and std per column over the rows of the training split, applied after the gather
(float32 batches) or baked into a derived file (bfloat16 batches: the loader then only copies).
Derived files are float32 (`.f32`) or bfloat16 (`.bf16`: the float32 values rounded to nearest even,
so a bf16 batch equals the float32 batch rounded, bit for bit).

A derived file is data stride wrote, checked as the store's own files are: beside each one a record
(`<name>.json`: its cache key, size, XXH3-128 of its bytes and blake2b digests of 64 sampled blocks, as a store's
manifest holds for values.bin) is written before it is renamed into place. Each use checks the size and the sampled
blocks (milliseconds, whatever the size); `stride data inspect STORE --verify` checks every byte (`verify_derived`).
A file without its record (written by an earlier stride), of another key or size, or whose blocks differ is
rebuilt, with a warning naming it and why: a cache filled with NaN (or planted) had been used by name and size
alone, and its NaN loss was blamed on the learning rate (audit 14, M4).

Numerics (why not running sums): var = E[x^2] - E[x]^2 from sums carried along a series loses every
digit once the sums dwarf the variance (a price of 1e4 with ticks of 1e-2 over 2e5 rows: 29% error
in z, measured in tests/data). Here every sum is of deviations from a shift close to the data and
taken from past rows only (the previous chunk's mean for `expanding`, the mean of the chunk's first
window for `rolling`; a shift from later rows would let the future into the last bits), cumulative
sums run over one chunk, never the series, and chunks are merged as (count, mean, M2) (Chan et
al.), so the error is bounded by the spread of the data within a chunk, not by its level or the
series' length. A rolling window's sums are differences of two cumulative sums of its chunk, which
starts again from the raw rows (nothing carried, nothing drifts); a chunk is at most
max(ROLLING_BLOCK, window) + window - 1 rows, in column groups of at most GROUP_ELEMS values.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stride.data import mapped_files
from stride.data.store import StoreError, changed_block, derived_dir, derived_writable, sample_digests
from stride.errors import os_reason
from stride.files.checksum import checksum_file
from stride.files.input_file import InputFileError, read_input_text
from stride.files.owner import remove_abandoned, tagged_name
from stride.files.user_cache import user_cache_dir

CHUNK = 1 << 16  # rows per chunk for `expanding`, `select` and train statistics
ROLLING_BLOCK = 1 << 12  # output rows per chunk for `rolling` (at least `window`)
_LEFTOVER = re.compile(r"^derived-[0-9a-f]{8}-")  # the rest of a tagged temporary cache file's name
GROUP_ELEMS = 1 << 22  # float64 elements per column group in a rolling chunk (32 MiB per temporary)
EPS = 1e-8
_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)  # a read-only store: the cache goes to the user's folder

log = logging.getLogger("stride.data")


def _merge(a: tuple[int, np.ndarray, np.ndarray], b: tuple[int, np.ndarray, np.ndarray]
           ) -> tuple[int, np.ndarray, np.ndarray]:
    """(count, mean, M2) of the union of two sets of rows (Chan, Golub and LeVeque)."""
    na, ma, qa = a
    nb, mb, qb = b
    if na == 0:
        return b
    n = na + nb
    delta = mb - ma
    return n, ma + delta * (nb / n), qa + qb + delta**2 * (na * nb / n)


class NonFiniteFeature(ValueError):
    """A NaN or inf among the rows statistics are fitted on: `row` of the features, `index` into the columns."""

    def __init__(self, row: int, index: int) -> None:
        super().__init__(f"NaN or inf at row {row}, column {index}")
        self.row, self.index = row, index


def train_stats(features: torch.Tensor, row_ranges: list[tuple[int, int]], cols: list[int] | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, 1/std) per column (of `cols`, default all) over the row ranges, in float64, chunk by chunk.

    A NaN or inf there (ingestion never writes one: a store changed since) raises NonFiniteFeature
    rather than fitting NaN statistics that would train to a NaN loss."""
    idx = None if cols is None else torch.tensor(cols)
    f = features.shape[1] if idx is None else len(cols)
    acc: tuple[int, np.ndarray, np.ndarray] = (0, np.zeros(f), np.zeros(f))
    for lo, hi in row_ranges:
        for a in range(lo, hi, CHUNK):
            x = features[a : min(hi, a + CHUNK)]
            x = (x if idx is None else x.index_select(1, idx)).double().numpy()
            if not np.isfinite(x).all():
                r, c = np.argwhere(~np.isfinite(x))[0]
                raise NonFiniteFeature(a + int(r), int(c))
            m = x.mean(0)
            acc = _merge(acc, (len(x), m, ((x - m) ** 2).sum(0)))
    n, mean, m2 = acc
    if n == 0:
        raise ValueError("no training rows to fit normalisation statistics on")
    std = np.sqrt(m2 / n)
    inv = np.where(std > 1e-12, 1.0 / np.where(std > 1e-12, std, 1.0), 1.0)
    return torch.tensor(mean, dtype=torch.float32), torch.tensor(inv, dtype=torch.float32)


def _zscore(x: np.ndarray, n: np.ndarray, s1: np.ndarray, s2: np.ndarray, c: np.ndarray, eps: float) -> np.ndarray:
    """z of rows x given, per row, the count n and the sums s1, s2 of (row - c) over its statistics window."""
    mean_dev = s1 / n
    var = np.maximum(s2 / n - mean_dev**2, 0.0)  # both terms are of deviations from c: no large-level cancellation
    std = np.where(n > 1, np.sqrt(var), 1.0)
    return ((x - c - mean_dev) / (std + eps)).astype(np.float32)


def expanding_zscore(x: np.ndarray, state: tuple[int, np.ndarray, np.ndarray] | None = None, eps: float = EPS
                     ) -> tuple[np.ndarray, tuple[int, np.ndarray, np.ndarray]]:
    """Z-score rows of x [n, F] by the mean/std of all rows up to each one (and of the rows in `state`).

    `state` is (count, mean, M2) of the rows before; the returned state includes x. Sums within the
    chunk are of deviations from the previous mean (the chunk's first row when there is none).
    """
    x64 = x.astype(np.float64)
    n0, m0, q0 = state if state is not None else (0, x64[0].copy(), np.zeros(x.shape[1]))
    c = m0
    d = x64 - c
    cnt = (n0 + np.arange(1, len(x) + 1, dtype=np.float64))[:, None]
    s1 = np.cumsum(d, axis=0)  # the earlier rows have mean c: their deviations sum to 0
    s2 = q0 + np.cumsum(d * d, axis=0)
    z = _zscore(x64, cnt, s1, s2, c, eps)
    m_end = c + s1[-1] / cnt[-1]
    q_end = s2[-1] - s1[-1] ** 2 / cnt[-1]
    return z, (int(cnt[-1, 0]), m_end, np.maximum(q_end, 0.0))


def rolling_zscore(x: np.ndarray, window: int, n_context: int, eps: float = EPS) -> np.ndarray:
    """Z-score the rows x[n_context:] by the mean/std of the last `window` rows up to each one.

    x [n_context + n, F] holds the rows before the chunk first; n_context < window - 1 means the
    symbol starts at x[0], so those rows use the rows so far (the warm-up). One shift per chunk
    (the mean of the first output row's window: a shift from later rows would make the last bits of a
    row depend on the future); a window's sums are differences of cumulative sums over this chunk only.
    """
    x64 = x.astype(np.float64)
    c = x64[: n_context + 1].mean(0)  # the first output row's window: near every window, and only past rows
    d = x64 - c
    zero = np.zeros((1, x.shape[1]))
    c1 = np.concatenate([zero, np.cumsum(d, axis=0)])
    c2 = np.concatenate([zero, np.cumsum(d * d, axis=0)])
    j = np.arange(n_context, len(x))  # output rows' positions in x
    n = np.minimum(window, j + 1)  # rows in each statistics window (x[0] is the symbol's first row if short)
    s1 = c1[j + 1] - c1[j + 1 - n]
    s2 = c2[j + 1] - c2[j + 1 - n]
    return _zscore(x64[n_context:], n[:, None].astype(np.float64), s1, s2, c, eps)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 bit patterns (uint16), rounded to nearest even as torch rounds."""
    return torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(torch.bfloat16).view(torch.uint16).numpy()


FILE_DTYPES = {"float32": (np.float32, "f32", lambda x: x), "bfloat16": (np.uint16, "bf16", bf16_bits)}


def _write_rolling(values: torch.Tensor, dst: np.ndarray, idx: torch.Tensor, lo: int, hi: int, window: int,
                   encode: Callable[[np.ndarray], np.ndarray]) -> None:
    """Rolling z-scores of one symbol's rows [lo, hi) into dst, chunk by chunk and column group by group."""
    block = max(ROLLING_BLOCK, window)
    group = max(1, GROUP_ELEMS // (block + window))
    for a in range(lo, hi, block):
        b = min(hi, a + block)
        e0 = max(lo, a - window + 1)  # the rows before the chunk that its first windows reach
        for g in range(0, len(idx), group):
            cols = idx[g : g + group]
            x = values[e0:b].index_select(1, cols).double().numpy()
            dst[a:b, g : g + len(cols)] = encode(rolling_zscore(x, window, a - e0))


def derived_features(values: torch.Tensor, store_path: Path, values_sha: str, cols: list[int],
                     segments: tuple[np.ndarray, np.ndarray], mode: str, window: int = 0, *,
                     dtype: str = "float32", shift: torch.Tensor | None = None,
                     scale: torch.Tensor | None = None) -> np.memmap:
    """A [rows, len(cols)] memory map of the chosen columns: raw (`select`), `expanding`, `rolling` or
    `train` ((x - shift) * scale, fitted on the train split), in `dtype` (bfloat16 as uint16 bits).

    Cached under <store>/derived/, keyed by everything the file depends on (`cache_key`: the symbol runs
    too); written to a temporary name and renamed, so a half-written cache is never used. A store that
    cannot be written (a shared or mounted dataset) keeps its caches in user_derived_dir (one warning
    line says where).
    """
    np_dtype, suffix, encode = FILE_DTYPES[dtype]
    if (mode == "train") != (shift is not None and scale is not None):
        raise ValueError("mode 'train' needs shift and scale, and only it takes them")
    tag = f"{mode}{window}" if mode == "rolling" else mode
    key = cache_key(values, values_sha, cols, segments, tag, dtype, shift, scale)
    name = f"{tag}-{key}.{suffix}"
    n = values.shape[0]
    size = n * len(cols) * np.dtype(np_dtype).itemsize
    in_store = derived_dir(store_path)  # a derived/ leading out of the store: refused (StoreError)
    out = in_store / name
    why = _cache_problem(out, size, key)
    if why is not None and not derived_writable(store_path):
        out = user_derived_dir(values_sha) / name  # a read-only store: its caches go to the user's cache folder
        why = _cache_problem(out, size, key)

    def build(path: Path) -> None:
        _build(path, values, cols, segments, mode, window, np_dtype, encode, shift, scale, key)

    if why is not None:
        if os.path.lexists(out):  # not the cache this code writes (a link, cut short, changed, unrecorded): rebuilt
            if why != _UNRECORDED:
                log.warning("stride: derived feature cache %s %s: rebuilding it", out, why)
            out.unlink()
        try:
            build(out)
        except OSError as exc:
            if out.parent != in_store or exc.errno not in _UNWRITABLE:
                raise _cache_error(store_path, out.parent, exc) from None
            out = user_derived_dir(values_sha) / name  # os.access said yes, the write said no (a read-only mount)
            if _cache_problem(out, size, key) is not None:
                try:
                    build(out)
                except OSError as exc2:
                    raise _cache_error(store_path, out.parent, exc2) from None
    if out.parent != in_store:
        log.warning("stride: %s cannot be written (a read-only store): derived feature cache %s kept in %s",
                    store_path, name, out.parent)
    mapped = np.memmap(out, dtype=np_dtype, mode="c", shape=(n, len(cols)))
    mapped_files.record(out, mapped)  # named, should the cache be changed in place while mapped (audit 16, M3)
    return mapped


def cache_key(values: torch.Tensor, values_sha: str, cols: list[int], segments: tuple[np.ndarray, np.ndarray],
              tag: str, dtype: str, shift: torch.Tensor | None = None, scale: torch.Tensor | None = None) -> str:
    """16 hex digits of everything a derived file depends on: the data's checksum, its shape and dtype (the same
    bytes read as other rows or columns are other data), the columns, the symbol runs (statistics restart at
    each one, and rows outside them are not written), the mode and window, the file's dtype and the `train`
    statistics. Two read-only stores with byte-identical values.bin share one user cache folder, so a key
    without the runs would z-score one store's symbol with another's rows (audit 9 #3); v3 also retires every
    older key, which left the runs out."""
    starts, stops = (np.ascontiguousarray(a, dtype=np.int64) for a in segments)
    runs = hashlib.sha256(starts.tobytes() + b"|" + stops.tobytes()).hexdigest()
    ident = (f"{values_sha}|{tuple(values.shape)}|{values.dtype}|{cols}|runs={len(starts)}:{runs}|{tag}|{dtype}"
             "|v3")
    if shift is not None and scale is not None:
        ident += "|" + hashlib.sha256(shift.numpy().tobytes() + scale.numpy().tobytes()).hexdigest()
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def user_derived_dir(values_sha: str) -> Path:
    """Where a read-only store's derived caches go: the user's cache folder, one folder per data checksum (the
    cache names already hold it; the folder keeps stores apart and can be removed as a whole)."""
    return user_cache_dir() / "derived" / values_sha[:16]


RECORD_FORMAT = "stride-derived-1"
_UNRECORDED = "has no record of its checksum (written by an earlier stride)"


def record_path(path: Path) -> Path:
    """Where the record of the derived file `path` is kept: `<name>.json` beside it."""
    return path.with_name(path.name + ".json")


def _write_record(data: Path, final: Path, key: str) -> None:
    """The record of the derived file `data` (about to be renamed to `final`), written whole under its final name."""
    size = data.stat().st_size
    record = {"format": RECORD_FORMAT, "name": final.name, "key": key, "bytes": size, "xxh3_128": checksum_file(data),
              "sample": sample_digests(data, size)}
    tmp = data.with_name(data.name + ".json")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, record_path(final))


def _read_record(path: Path) -> dict[str, Any] | None:
    """The record of the derived file `path` when it is one stride writes (a small regular file of that shape)."""
    rec = record_path(path)
    if os.path.islink(rec):
        return None
    try:  # a regular file of at most 1 MiB (a record is ~5 KiB)
        obj = json.loads(read_input_text(rec, limit=1 << 20, what="derived cache record"))
    except (InputFileError, ValueError, RecursionError):
        return None
    smp = obj.get("sample") if isinstance(obj, dict) else None
    if not (isinstance(obj, dict) and obj.get("format") == RECORD_FORMAT and isinstance(obj.get("key"), str)
            and type(obj.get("bytes")) is int and isinstance(obj.get("xxh3_128"), str) and isinstance(smp, dict)
            and type(smp.get("block_bytes")) is int and 0 < smp["block_bytes"] <= 1 << 24
            and isinstance(smp.get("offsets"), list) and isinstance(smp.get("blake2b_64"), list)
            and len(smp["offsets"]) == len(smp["blake2b_64"]) <= 4096
            and all(type(o) is int and o >= 0 for o in smp["offsets"])
            and all(isinstance(d, str) for d in smp["blake2b_64"])):
        return None
    return obj


def _cache_problem(path: Path, size: int, key: str) -> str | None:
    """Why `path` is not the derived file of `key` this code writes (None: it is): missing, a link, not a regular
    file, another size, without its record (or a record of another key or size), or sampled blocks that differ
    from the record's digests."""
    if not os.path.lexists(path):
        return "is missing"
    if path.is_symlink() or not path.is_file():
        return "is a link or not a regular file"
    if (got := path.stat().st_size) != size:
        return f"holds {got} bytes, not {size}"
    record = _read_record(path)
    if record is None:
        return _UNRECORDED
    if record["key"] != key or record["bytes"] != size:
        return f"has a record of another cache (key {record['key'][:16]!r}, {record['bytes']} bytes)"
    if (o := changed_block(path, record["sample"])) is not None:
        return (f"changed since it was written (bytes {o}..{o + record['sample']['block_bytes'] - 1} differ from "
                "its record's digest)")
    return None


def verify_derived(store: Path) -> int:
    """Check every byte of the store's derived feature files against their records (`stride data inspect
    --verify`); returns how many were verified. One that differs is a StoreError naming it; one without a record
    (an earlier stride's) is left for the next run that uses it to rebuild."""
    folder = derived_dir(store)
    if not folder.is_dir():
        return 0
    checked = 0
    for f in sorted(folder.iterdir()):
        if f.suffix not in (".f32", ".bf16") or f.name.startswith(".") or (record := _read_record(f)) is None:
            continue
        if f.is_symlink() or not f.is_file() or f.stat().st_size != record["bytes"] \
                or checksum_file(f) != record["xxh3_128"]:
            raise StoreError(f"{f}: differs from its record ({record_path(f).name}: {record['bytes']} bytes, "
                             f"xxh3_128 {record['xxh3_128'][:16]}...): the derived feature cache was changed since "
                             "it was written; delete it (the next run that needs it rebuilds it)")
        checked += 1
    return checked


def _cache_error(store: Path, folder: Path, exc: OSError) -> StoreError:
    """One line naming the store and the folder; in the user's folder (the store is read-only): which to set."""
    hint = "; the store is read-only: set STRIDE_CACHE_DIR to a writable folder" if \
        folder.parent.parent == user_cache_dir() else ""
    return StoreError(f"cannot write the derived feature cache of {store} in {folder}: {os_reason(exc)}{hint}")


def _build(out: Path, values: torch.Tensor, cols: list[int], segments: tuple[np.ndarray, np.ndarray], mode: str,
           window: int, np_dtype: type, encode: Callable[[np.ndarray], np.ndarray], shift: torch.Tensor | None,
           scale: torch.Tensor | None, key: str) -> None:
    """Write the cache `out` under a temporary name in its folder, then its record (`_write_record`), and rename it
    into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(out.parent, rest=_LEFTOVER)  # a killed run's half-written cache
    tmp = out.parent / tagged_name("tmp", f"derived-{uuid.uuid4().hex[:8]}-{out.name}")
    n = values.shape[0]
    dst = np.memmap(tmp, dtype=np_dtype, mode="w+", shape=(n, len(cols)))
    idx = torch.tensor(cols)
    try:
        for lo, hi in zip(*segments, strict=True):
            lo, hi = int(lo), int(hi)
            if mode == "rolling":
                _write_rolling(values, dst, idx, lo, hi, window, encode)
                continue
            state = None
            for a in range(lo, hi, CHUNK):
                b = min(hi, a + CHUNK)
                x = values[a:b].index_select(1, idx).float().numpy()
                if mode == "expanding":
                    x, state = expanding_zscore(x, state)
                elif mode == "train":  # the same float32 ops, in the same order, as RowWindows.gather
                    np.subtract(x, shift.numpy(), out=x)  # type: ignore[union-attr]
                    np.multiply(x, scale.numpy(), out=x)  # type: ignore[union-attr]
                dst[a:b] = encode(x)
        dst.flush()
        del dst
        _write_record(tmp, out, key)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + ".json").unlink(missing_ok=True)
        raise
