"""Window sources: a window is a view of T consecutive rows; a batch is one vectorised gather.

Two layouts: `ArrayWindows` over an in-memory [A, N, F] series (the synthetic market) and
`RowWindows` over a store's row-major [rows, F] memory map, where each symbol (and, unless asked,
each day) is a run of rows and windows are described by ranges of valid end rows, never a list.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from stride.data.gather import AHEAD, ColumnPicks, WindowGather, column_f64
from stride.data.loader import Batch, ShardedLoader
from stride.data.pages import MappedRows, file_rss_bytes


class ArrayWindows:
    """Windows ending at the (asset, t) pairs in `ends` over features [A, N, F] and targets [A, N, H]."""

    def __init__(self, features: torch.Tensor, targets: torch.Tensor, ends: np.ndarray, seq_len: int) -> None:
        self.features, self.targets, self.seq_len = features, targets, seq_len
        self.ends = np.asarray(ends, dtype=np.int64).reshape(-1, 2)  # [W, 2] (asset, end t)
        a, n = features.shape[0], features.shape[1]
        if len(self.ends) and (self.ends[:, 0].min() < 0 or self.ends[:, 0].max() >= a
                               or self.ends[:, 1].min() < seq_len - 1 or self.ends[:, 1].max() >= n):
            # the rows are one flat [A * N, F] table: a window ending before row seq_len - 1 of its asset read the
            # previous asset's last rows as its history, silently (audit 37)
            raise ValueError(f"window ends must be (asset in [0, {a}), t in [seq_len - 1 = {seq_len - 1}, {n})); got "
                             f"assets {self.ends[:, 0].min()}..{self.ends[:, 0].max()}, t "
                             f"{self.ends[:, 1].min()}..{self.ends[:, 1].max()}")
        # one flat row index over [A * N, F]; windows never cross assets (ends have a full history)
        self._rows = features.reshape(-1, features.shape[-1])
        self._gather = WindowGather(self._rows, seq_len)
        self._targets = targets.numpy()

    def __len__(self) -> int:
        return len(self.ends)

    def configure_gather(self, threads: int = 1, **kwargs: Any) -> None:
        """Rebuild the copy with these settings (`WindowGather`'s keywords; the probe's choice)."""
        self._gather.close()
        self._gather = WindowGather(self._rows, self.seq_len, threads, **kwargs)

    def batch_signature(self) -> str:
        return "x:float32"

    # -- what DeviceWindows copies to the device (stride.data.device_windows) --------------------
    n_targets = property(lambda self: self.targets.shape[-1])

    def device_row_count(self) -> int:
        return self._rows.shape[0]

    def device_row_bytes(self) -> int:
        return self._rows.shape[1] * 4

    def device_rows(self, device: torch.device, chunk: int) -> torch.Tensor:
        out = torch.empty((self._rows.shape[0], self._rows.shape[1]), dtype=torch.float32, device=device)
        for a in range(0, len(out), chunk):
            out[a : a + chunk].copy_(self._rows[a : a + chunk])
        return out

    def device_starts(self, ids: np.ndarray) -> np.ndarray:
        asset, end = self.ends[ids, 0], self.ends[ids, 1]
        return asset * self.features.shape[1] + end - (self.seq_len - 1)

    def window_targets(self, ids: torch.Tensor) -> torch.Tensor:
        i = ids.numpy()
        return torch.from_numpy(self._targets[self.ends[i, 0], self.ends[i, 1]])

    def gather(self, idx: torch.Tensor) -> Batch:
        i = idx.numpy()
        asset, end = self.ends[i, 0], self.ends[i, 1]
        x = self._gather(asset * self.features.shape[1] + end - (self.seq_len - 1), float32=True)
        return x, torch.from_numpy(self._targets[asset, end])


class WindowBatches(ShardedLoader):
    """The foundation's loader signature: windows over [A, N, F] ending at `ends`, as batches."""

    def __init__(self, features: torch.Tensor, targets: torch.Tensor, ends: np.ndarray, seq_len: int,
                 batch_size: int, **kwargs: object) -> None:
        super().__init__(ArrayWindows(features, targets, ends, seq_len), batch_size, **kwargs)  # type: ignore[arg-type]


def window_ends(n_assets: int, t_lo: int, t_hi: int) -> np.ndarray:
    """All (asset, t) with t in [t_lo, t_hi)."""
    t = np.arange(t_lo, t_hi)
    return np.stack(np.meshgrid(np.arange(n_assets), t, indexing="ij"), axis=-1).reshape(-1, 2)


LOG_PRICE_MAX_BYTES = 256 << 20  # the log-price column is kept in memory up to this size (32M rows)


def _check_ranges(ranges: np.ndarray, seq_len: int, horizons: list[int], n_rows: int, n_prices: int) -> None:
    """Refuse end-row ranges whose windows start before row 0 or whose targets read past the price column.

    Why: the copy kernel reads a target's price row without a bound check, so a range ending within the largest
    horizon of the table's end handed out targets made from memory after the column (-0.49 where the true
    return did not exist, seen with a 50-row table) instead of an error."""
    if not len(ranges):
        return
    if min(horizons, default=1) < 1:
        raise ValueError(f"horizons {horizons} must be positive: a target is a return after the window's end")
    first, last = int(ranges[:, 0].min()), int(ranges[:, 1].max()) - 1
    if first < seq_len - 1:
        raise ValueError(f"a window ending at row {first} would start at row {first - seq_len + 1}: end rows must be "
                         f">= seq_len - 1 = {seq_len - 1}")
    n, max_h = min(n_rows, n_prices), max(horizons, default=0)
    if last + max_h >= n:
        raise ValueError(f"a window ending at row {last} reads its target at row {last + max_h} (its largest horizon, "
                         f"{max_h} rows), past the table's last row {n - 1}: end rows must be < {n - max_h}")


class RowWindows:
    """Windows over rows of `features` [N, F] whose end rows lie in the half-open `ranges` [K, 2].

    The target of a window ending at row e is the forward log return of `price` (a 1-D view of one
    store column) from e to e+h for each horizon, times `target_scale`; `shift`/`scale` (per
    feature) normalise x after the gather, so a train-fitted normalisation costs no extra copy.
    `batch_dtype` is x's dtype: float32 (bfloat16 rows are upcast after the gather) or bfloat16
    (rows must be bfloat16 and already normalised: the batch is the copy and nothing else, half the
    bytes of float32; targets stay float32).
    """

    def __init__(
        self,
        features: torch.Tensor,
        price: torch.Tensor,
        ranges: np.ndarray,
        seq_len: int,
        horizons: list[int],
        *,
        shift: torch.Tensor | None = None,
        scale: torch.Tensor | None = None,
        target_scale: torch.Tensor | None = None,
        feature_map: np.memmap | None = None,
        price_map: np.memmap | None = None,
        resident_mb: float = 0,
        batch_dtype: torch.dtype = torch.float32,
        gather_threads: int = 1,
        ahead: int = AHEAD,
        stream: bool | None = None,
    ) -> None:
        if batch_dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"batch_dtype {batch_dtype} is not torch.float32 or torch.bfloat16")
        normalised = shift is not None or scale is not None
        if batch_dtype == torch.bfloat16 and (features.dtype != torch.bfloat16 or normalised):
            raise ValueError("bfloat16 batches are gathered from bfloat16 rows with any normalisation already "
                             "applied (normalize.derived_features(..., dtype='bfloat16')); got "
                             f"{features.dtype} rows{' and shift/scale' if normalised else ''}")
        self.batch_dtype = batch_dtype
        ranges = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        ranges = ranges[ranges[:, 1] > ranges[:, 0]]
        _check_ranges(ranges, seq_len, horizons, features.shape[0], price.shape[0])
        self.features, self.price, self.seq_len = features, price, seq_len
        self.lo = torch.from_numpy(np.ascontiguousarray(ranges[:, 0]))
        self.cum = torch.from_numpy(np.concatenate([[0], np.cumsum(ranges[:, 1] - ranges[:, 0])]))
        self.horizons = torch.tensor([0, *horizons], dtype=torch.long)
        self._lo, self._cum, self._horizons = self.lo.numpy(), self.cum.numpy(), self.horizons.numpy()
        # the targets' price rows, counted from a window's start, read by the copy right after each window
        self._picks = ColumnPicks(price, self._horizons + (seq_len - 1))
        self._log_picks: ColumnPicks | None = None  # the same rows of the log-price column, made on first use
        self._picks_for: tuple[torch.Tensor | None, ColumnPicks] = (None, self._picks)  # (target_scale, its picks)
        self.shift, self.scale = shift, scale
        self.target_scale = target_scale if target_scale is not None else torch.ones(len(horizons))
        self._gather = WindowGather(features, seq_len, gather_threads, ahead=ahead, stream=stream)
        self._batch_key: tuple | None = None  # (gather, picks, shift, scale, its one-call batch function)
        # page hints for memory-mapped data (pages.py): (file, first row read relative to the end row, rows)
        max_h = int(self.horizons.max())
        if feature_map is not None and price_map is feature_map:  # one file: history and targets together
            self._maps = [(MappedRows(feature_map), -(seq_len - 1), seq_len + max_h)]
        else:
            self._maps = ([(MappedRows(feature_map), -(seq_len - 1), seq_len)] if feature_map is not None else []) + (
                [(MappedRows(price_map), 0, max_h + 1)] if price_map is not None else [])
        self._resident = int(resident_mb * 2**20) if self._maps else 0
        self._rss_base = file_rss_bytes() if self._resident else 0  # libraries etc. mapped before any window
        for m, _, _ in self._maps:
            m.plan()  # read a small table whole in the background; a large one page by page (pages.py)

    def __len__(self) -> int:
        # numpy, not `self.cum[-1]`: that torch index took 80-90 us where the loader asks (once every
        # IDS_CHUNK batches, after a copy evicted torch's code), against 8-10 us for numpy's
        return int(self._cum[-1])

    def configure_gather(self, threads: int = 1, **kwargs: Any) -> None:
        """Rebuild the copy with these settings (`WindowGather`'s keywords; the probe's choice)."""
        self._gather.close()
        self._gather = WindowGather(self.features, self.seq_len, threads, **kwargs)
        self._picks_for = (None, self._picks)  # log-price targets need the kernel: decide again

    def batch_signature(self) -> str:
        norm = "+".join(k for k, v in (("shift", self.shift), ("scale", self.scale)) if v is not None) or "none"
        return f"x:{str(self.batch_dtype).removeprefix('torch.')}|norm:{norm}"

    # -- what DeviceWindows copies to the device (stride.data.device_windows) --------------------
    # The rows each range of windows reads ([first end - T + 1, last end + 1): history included;
    # ranges never overlap), concatenated, as a batch holds them (upcast, normalised).
    n_targets = property(lambda self: len(self._horizons) - 1)

    def _segments(self) -> tuple[np.ndarray, np.ndarray]:
        """(first row, row count) of each range's rows."""
        return self._lo - (self.seq_len - 1), np.diff(self._cum) + self.seq_len - 1

    def device_row_count(self) -> int:
        return int(self._segments()[1].sum())

    def device_row_bytes(self) -> int:
        return self.features.shape[1] * (2 if self.batch_dtype == torch.bfloat16 else 4)

    def device_rows(self, device: torch.device, chunk: int) -> torch.Tensor:
        first, count = self._segments()
        out = torch.empty((int(count.sum()), self.features.shape[1]), dtype=self.batch_dtype, device=device)
        o = 0
        for a, n in zip(first.tolist(), count.tolist(), strict=True):
            for c in range(0, n, chunk):
                k = min(chunk, n - c)
                out[o + c : o + c + k].copy_(self.features[a + c : a + c + k])  # bf16 -> float32 is exact
            o += n
        if self.shift is not None:  # the same float32 operations as a host batch's, so the same bits
            out.sub_(self.shift.to(device))
        if self.scale is not None:
            out.mul_(self.scale.to(device))
        return out

    def device_starts(self, ids: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self._cum, ids, side="right") - 1
        offsets = np.concatenate([[0], np.cumsum(self._segments()[1])])
        return offsets[k] + (ids - self._cum[k])

    def window_targets(self, ids: torch.Tensor) -> torch.Tensor:
        return self._targets(self._end_rows(ids.numpy().astype(np.int64, copy=False)))

    def end_rows(self, idx: torch.Tensor) -> torch.Tensor:
        """Window id -> its end row, through the cumulative range lengths (no per-window table)."""
        return torch.from_numpy(self._end_rows(idx.numpy().astype(np.int64, copy=False)))

    def _end_rows(self, idx: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self._cum, idx, side="right") - 1
        return self._lo[k] + (idx - self._cum[k])

    def _starts(self, idx: torch.Tensor) -> np.ndarray:
        """Window id -> its first row, for the numpy gather (the kernel maps ids itself); ids outside [0, len) raise."""
        ids = idx.numpy().astype(np.int64, copy=False)
        if len(ids) and (ids.min() < 0 or ids.max() >= len(self)):
            raise IndexError(f"window ids outside [0, {len(self)})")
        return self._end_rows(ids) - (self.seq_len - 1)

    def _prices(self, rows: np.ndarray) -> np.ndarray:
        lib = self._gather._lib
        if lib is not None:  # one C loop instead of a fancy index and a cast (same float64 values)
            rows = np.ascontiguousarray(rows, dtype=np.int64)
            out = np.empty(rows.shape, np.float64)
            lib.stride_pick_f64(self.price.data_ptr(), int(self.price.dtype == torch.bfloat16),
                                self.price.stride(0) * self.price.element_size(), rows.ctypes.data, rows.size,
                                out.ctypes.data)
            return out
        return column_f64(self.price, rows)

    def will_need(self, idx: torch.Tensor) -> None:
        """Start reading the pages these windows (history and targets) will read."""
        if self._maps:
            end = self._end_rows(idx.numpy().astype(np.int64, copy=False))
            for m, first, n in self._maps:
                m.will_need(end + first, n)

    def release_pages(self) -> None:
        """Unmap the pages read so far (they stay in the page cache): RSS back to the loader's own memory."""
        for m, _, _ in self._maps:
            m.release()

    def gather(self, idx: torch.Tensor) -> Batch:
        # No torch op on the indexes: tiny torch ops wake torch's intra-op thread team, which on a
        # busy machine costs milliseconds per op (measured 8 ms against 0.03 ms, 2 threads, load 3).
        # the one copy; float32 batches are upcast and normalised in it (bf16 batches: rows already
        # normalised, the copy is the whole batch); the targets' price rows read after each window
        picks = self._target_picks()
        batch = self._id_batches(picks)
        if batch is not None:  # ids to rows, the copy and the targets in one C call (WindowGather.id_batches)
            if idx.dtype != torch.int64 or not idx.is_contiguous():
                idx = torch.from_numpy(np.ascontiguousarray(idx.numpy(), dtype=np.int64))  # no torch op (above)
            x, p = batch(idx)
        else:
            x, p = self._gather.with_picks(self._starts(idx), picks, float32=self.batch_dtype == torch.float32,
                                           shift=self.shift, scale=self.scale)
        if self._resident and file_rss_bytes() - self._rss_base > self._resident:
            self.release_pages()  # unmap what was read (it stays in the page cache)
        return x, (p if picks is self._log_picks else self._log_returns(p))  # type: ignore[return-value,arg-type]

    def _id_batches(self, picks: ColumnPicks):  # noqa: ANN202
        """The gather's one-call batch function for these picks and this normalisation, made again when any
        of them (or the gather, after `configure_gather`) is another object; None without the kernel."""
        key = self._batch_key
        if key is None or key[0] is not self._gather or key[1] is not picks or key[2] is not self.shift \
                or key[3] is not self.scale:
            fn = self._gather.id_batches(self.lo, self.cum, picks, float32=self.batch_dtype == torch.float32,
                                         shift=self.shift, scale=self.scale)
            self._batch_key = key = (self._gather, picks, self.shift, self.scale, fn)
        return key[4]

    def _target_picks(self) -> ColumnPicks:
        """The targets made in the copy from the log-price column where the kernel is built and that column
        (8 bytes a row) fits LOG_PRICE_MAX_BYTES; else the prices, for numpy's log after the copy.

        Why: the log, the subtraction and the scaling after the copy are a few numpy calls on a [B, 1 + H]
        array, but each finds its code and data evicted by the 4 MiB copy: 60 us a batch of 256 at load 6
        (AMD EPYC), 13% of the gather. np.log of the whole column gives each row's log with the same bits
        as np.log of a batch's rows (its SIMD log is elementwise), so the targets are unchanged."""
        ts = self.target_scale
        if ts is self._picks_for[0]:  # decided for this scale already (a few torch calls less a batch)
            return self._picks_for[1]
        if self._gather._lib is None or ts.dtype != torch.float32 or not ts.is_contiguous() \
                or self.price.shape[0] * 8 > LOG_PRICE_MAX_BYTES or self._resident:
            picks = self._picks
        else:
            if self._log_picks is None:
                log = torch.from_numpy(np.log(column_f64(self.price, slice(None))))
                self._log_picks = ColumnPicks(self.price, self._picks.offsets, log)
            self._log_picks.set_scale(ts)
            picks = self._log_picks
        self._picks_for = (ts, picks)
        return picks

    def runs(self) -> np.ndarray:
        """The half-open end-row ranges [K, 2] of the windows, in window-id order."""
        return np.stack([self._lo, self._lo + np.diff(self._cum)], axis=1)

    def gather_run(self, first_end: int, n: int, pin: bool = False, contiguous: bool = False) -> Batch:
        """The n windows ending at rows first_end .. first_end+n-1 (one run), without copying each window.

        x is an overlapping [n, T, F] view (`unfold`) of one copied slab of n+T-1 rows: (n+T-1)/(n*T)
        of the bytes of `gather` (1/85 for n=256, T=128), with the same values; normalisation runs on
        the slab. The view shares memory between windows: read it, do not write into it.
        `contiguous`: materialise the view (numpy, one thread: the slab is in cache, so only the
        writes go to memory; torch's `.contiguous()` of it took 11x the CPU on a busy 2-thread team).
        """
        t = self.seq_len
        a = first_end - (t - 1)
        if n < 1 or a < 0 or first_end + n > self.features.shape[0]:
            raise IndexError(f"windows ending at rows {first_end}..{first_end + n - 1} leave the table")
        # one of this source's runs must hold them all: past its end a window reads the next split's rows (or the
        # next symbol's or day's) and its targets the rows after, past the table at its end (audit 37)
        # (the ranges as given, in any order: a search over sorted starts refused valid windows of unsorted ones)
        hi = self._lo + np.diff(self._cum)  # each run's end, exclusive
        inside = (self._lo <= first_end) & (first_end < hi)
        stop = int(hi[inside].max()) if inside.any() else -1
        if first_end + n > stop:
            why = (f"the last window of its run ends at row {stop - 1}" if first_end < stop else
                   f"row {first_end} is no window end of this source")
            raise IndexError(f"windows ending at rows {first_end}..{first_end + n - 1} are not all windows of this "
                             f"source ({why}; `runs()` lists its end-row ranges): past them a window reads another "
                             "split's, symbol's or day's rows")
        rows = self._gather._rows  # numpy view of the table (bf16 as int16)
        slab = torch.from_numpy(np.array(rows[a : first_end + n]))  # the one copy
        if self._resident and file_rss_bytes() - self._rss_base > self._resident:
            self.release_pages()
        if self.features.dtype == torch.bfloat16:
            slab = slab.view(torch.bfloat16)
        if self.batch_dtype == torch.float32:
            slab = slab.float() if slab.dtype != torch.float32 else slab
            sn = slab.numpy()
            if self.shift is not None:
                np.subtract(sn, self.shift.numpy(), out=sn)
            if self.scale is not None:
                np.multiply(sn, self.scale.numpy(), out=sn)
        x = slab.unfold(0, t, 1).transpose(1, 2)
        if contiguous:
            bf16 = x.dtype == torch.bfloat16
            x = torch.from_numpy(np.ascontiguousarray((x.view(torch.int16) if bf16 else x).numpy()))
            x = x.view(torch.bfloat16) if bf16 else x
        if pin:
            x = x.pin_memory() if contiguous else slab.pin_memory().unfold(0, t, 1).transpose(1, 2)
        return x, self._targets(first_end + np.arange(n, dtype=np.int64))

    def _targets(self, end: np.ndarray) -> torch.Tensor:
        return self._log_returns(self._prices(end[:, None] + self._horizons))

    def _log_returns(self, p: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Targets from the price rows [B, 1 + H] (float64, overwritten): log p[h] - log p[0], float32, scaled.

        numpy's log (its SIMD log is not libm's: the C kernel could not give the same bits), then
        the rest in one C call where built (three numpy ops on a [256, 4] array took 12 us, AMD EPYC)."""
        pn = p.numpy() if isinstance(p, torch.Tensor) else p
        np.log(pn, out=pn)
        lib, ts = self._gather._lib, self.target_scale
        if lib is None or ts.dtype != torch.float32 or not isinstance(p, torch.Tensor):
            return torch.from_numpy((pn[:, 1:] - pn[:, :1]).astype(np.float32) * ts.numpy())
        y, ts = torch.empty((len(p), p.shape[1] - 1), dtype=torch.float32), ts.contiguous()
        lib.stride_log_returns(p.data_ptr(), len(p), p.shape[1], ts.data_ptr(), y.data_ptr())
        return y

