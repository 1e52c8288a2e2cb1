"""A batch of windows as B block copies: the C copy kernel, or a numpy fancy index where it cannot be built.

A window is T consecutive rows, one contiguous block of a row-major table, so a batch is B memcpy
calls (`stride/data/copy_kernel.c`, built by `native.py`; each call releases the GIL). The kernel
also makes float32 batches in the same pass: bf16 rows upcast, and the train normalisation
(x - shift) * scale, rounded as numpy's two ops round them (bit for bit, tested), and reads the
targets' price rows right after each window (`picks`). Before each window it hints the page heads
of the window `ahead` on, so those pages stream when the copy reaches them, and with `lines` it
copies 4 pages at once (a window's, or a few small windows') while the next windows' lines are
hinted (the distance, `lines` and streaming stores chosen per host by `stride.data.probe`).

Where the bandwidth goes (AMD EPYC 2-core host; copy_kernel.c and docs/data.md have the figures):
random 16 KiB blocks copy at 0.51-0.66 of one contiguous copy of the same bytes, a fixed cost of
about 0.7 us a block (about a DRAM latency per 4 KiB page: 64 KiB blocks reach 0.80-0.87); the
page-head hints recover 13-26%, the interleaved page streams (`lines`) 25-35% more, and batch
buffers in huge pages (`large_buffer`) 12-30%.

The fallback: the rows viewed as an overlapping array of N-T/k+1 items of T/k rows and one numpy
fancy index of the windows' sub-block starts; k sub-blocks a window so that B*k > 500, because numpy
releases the GIL in a fancy index only above 500 indices (`NPY_BEGIN_THREADS_THRESHOLDED`).

`threads` > 1 (`data.gather_threads`) splits a batch over that many threads, each copying its
windows into its rows of one output (the kernel, or `torch.index_select` in the fallback).
"""

from __future__ import annotations

import ctypes
import math
import mmap
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from stride.data import native

GIL_FREE_MIN_INDICES = 501  # numpy keeps the GIL for fancy indexes of <= 500 items
# windows on whose page heads the kernel hints (0: none; the probe times 0 and this). 2, not 4: the loader's CPU a
# batch fell 2-4 % (float32) and 0-4 % (bf16) with 2, from a store in L3 (256 MiB) and past it (1 GiB), and 2 was
# the fastest of 0-8 there (Intel Xeon KVM, 8-16 alternated rounds of 100 batches, 2026-12-04); on the AMD EPYC
# host 2 was 3-11 % ahead of 4 in C and level in the loader (docs/data.md)
AHEAD = 2
# pages copied at once as interleaved streams, the next windows' lines hinted (0: one window after another; the
# probe may choose 0 or 4). 12, not glibc's 4: 16-17% less CPU a float32 batch with streaming stores, 11-12% bf16
# (AMD EPYC; copy_kernel.c); at most 16 (MAX_STREAMS there)
LINES = 12
MAX_LINES = 16


def l2_bytes() -> int:
    """The L2 cache of cpu0 (sysfs), 1 MiB where it cannot be read."""
    for idx in range(8):
        base = f"/sys/devices/system/cpu/cpu0/cache/index{idx}/"
        try:
            with open(base + "level") as f:
                if f.read().strip() != "2":
                    continue
            with open(base + "size") as f:
                text = f.read().strip().upper()
            return int(text.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
        except (OSError, ValueError):
            continue
    return 1 << 20


_L2 = l2_bytes()


def column_f64(col: torch.Tensor, rows: np.ndarray | slice) -> np.ndarray:
    """The float32 or bf16 column's values at `rows`, as float64 (numpy; the kernel's picks give the same)."""
    if col.dtype == torch.bfloat16:  # bf16 bits are the top half of a float32
        bits = col.view(torch.int16).numpy()[rows].astype(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64)
    return col.numpy()[rows].astype(np.float64)


class ColumnPicks:
    """What the kernel reads for each window's targets right after its copy, at `offsets` rows past the
    window's start of a 1-D float32 or bf16 column (a view of one table column): the values as float64
    [B, m] or, with `log_column` (np.log of the column as float64) and a float32 `scale`, the targets
    (log[offsets[1:]] - log[offsets[0]]) as float32 times scale, [B, m - 1]."""

    def __init__(self, col: torch.Tensor, offsets: np.ndarray, log_column: torch.Tensor | None = None) -> None:
        self.col, self.offsets, self.log_column = col, np.ascontiguousarray(offsets, dtype=np.int64), log_column
        self.m = len(self.offsets)
        self.struct = native.Picks(col.data_ptr(), col.stride(0) * col.element_size(), self.m,
                                   self.offsets.ctypes.data, int(col.dtype == torch.bfloat16),
                                   log_column.data_ptr() if log_column is not None else None, None)
        self.ref = ctypes.byref(self.struct)
        self.scale: torch.Tensor | None = None
        # what the kernel writes a window: [m - 1] float32 targets, or [m] float64 values
        self.width, self.dtype = (self.m - 1, torch.float32) if log_column is not None else (self.m, torch.float64)

    def set_scale(self, scale: torch.Tensor) -> None:
        """The targets' scale (float32, contiguous, m - 1 values), kept alive here while the kernel reads it."""
        if scale is not self.scale:
            self.scale, self.struct.scale = scale, scale.data_ptr()

    def numpy(self, starts: np.ndarray) -> np.ndarray:
        return column_f64(self.col, starts[:, None] + self.offsets)


HUGE_PAGE = 2 << 20


def large_buffer(nbytes: int) -> np.ndarray:
    """`nbytes` of new memory (uint8), 2 MiB aligned and advised into transparent huge pages where the
    kernel offers them (Linux; `madvise` mode included), else numpy's.

    Why: a 4 MiB batch written into 4 KiB pages takes a TLB miss every 4 KiB of its destination. Into
    huge pages the window copy ran +12% faster with the destination in cache and +30% with it outside
    (AMD EPYC under KVM, 4 buffers of each kind alternated 200 rounds, load 0.4; every buffer of a kind
    alike, so it is not placement luck). Memory: the mapping is 2 MiB larger than asked, never touched
    beyond `nbytes`, so not resident.
    """
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is None or nbytes < HUGE_PAGE:
        return np.empty(nbytes, np.uint8)
    try:
        m = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        m.madvise(advice)
    except (OSError, ValueError, AttributeError):
        return np.empty(nbytes, np.uint8)
    whole = np.frombuffer(m, np.uint8)  # holds the mapping: unmapped when the last view is gone
    off = -whole.ctypes.data % HUGE_PAGE
    return whole[off : off + nbytes]


class BatchBuffers:
    """Batch outputs of each shape recycled once nothing refers to them any more, so a batch does not cost
    page faults for fresh memory; those of 2 MiB or more in huge pages (`large_buffer`).

    Why: glibc hands a thread other than the main one its own arena, and gives a freed 4 MiB chunk there
    back to the kernel, so every batch a prefetch thread allocates is new memory: 41-160 minor faults and
    270-430 us more CPU a 4 MiB batch than the same allocation on the main thread (AMD EPYC, measured in
    one process; prefetch cost 2x the CPU of no prefetch).

    How: each shape keeps base tensors, and a batch is an alias of one (`detach`: a new tensor on the
    same storage). The storage's use count (one per tensor, view, numpy array or saved autograd tensor
    holding it) says whether anything but the base still refers to it; a base is handed out again only
    at its idle count, so a batch's values stay as gathered while anything lives that can read them. A
    base whose memory moved (`share_memory_`, when a batch is sent to another process) is dropped, never
    written again; bases are made outside inference mode (an inference-mode base would make every later
    batch an inference tensor, which training refuses). One lock around the look-up: the consumer's
    thread only lets go (counts fall), the building thread takes. The bases are looked at oldest first
    (the likeliest let go). While every base is held, a new one is made and kept, up to MAX_RING a shape
    (a consumer holding 16 batches, as the benchmark's cold-destination way does, then takes no new
    memory); beyond, new memory that is not kept. Idle bases beyond MAX_KEPT go at the next batch of
    their shape.

    Why not a weakref on a numpy view (the previous way): the view, its weakref and callback,
    `torch.from_numpy` and the bf16 view made and freed around every batch cost 22 us of Python a 2 MiB
    bf16 batch (Intel Xeon, KVM; code and data evicted by the copy before each), 11% of the batch;
    checking a count and `detach` cost under 3.
    """

    MAX_KEPT = 8  # idle bases kept a shape (a prefetch depth of 2 and a consumer use 4)
    MAX_RING = 32  # bases kept a shape, held or idle

    def __init__(self) -> None:
        # per (shape, dtype): [base, its storage's address for the count, its idle count, its data address]
        self._rings: dict[tuple[tuple[int, ...], torch.dtype], list[tuple[torch.Tensor, int, int, int]]] = {}
        self._lock = threading.Lock()  # uncontended where one thread builds the batches (0.15 us)

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if _use_count is None:  # torch without the count: new memory a batch (correct, not recycled)
            return _new(shape, dtype)
        with self._lock:
            ring = self._rings.get((shape, dtype))
            if ring is None:
                ring = self._rings.setdefault((shape, dtype), [])
            for k, (base, cdata, idle, ptr) in enumerate(ring):
                if _use_count(cdata) != idle:
                    continue  # held: nothing but its holders can add a reference, so idle stays idle
                if base.data_ptr() != ptr:  # moved (share_memory_ when a batch went to another process): the
                    del ring[k]  # receiver may still read it, so it is never written again
                    break
                ring.append(ring.pop(k))  # last to be looked at: a batch just handed out is the likeliest held
                if len(ring) > self.MAX_KEPT:  # idle since a burst of live batches: their memory goes back
                    extra, kept = len(ring) - self.MAX_KEPT, []
                    for e in ring[:-1]:
                        if extra and _use_count(e[1]) == e[2]:
                            extra -= 1
                        else:
                            kept.append(e)
                    ring[:-1] = kept
                return base.detach()
            if len(ring) >= self.MAX_RING:
                return _new(shape, dtype)
            with torch.inference_mode(False):  # a base made in inference mode would make every alias one
                base = _new(shape, dtype)
            cdata = base.untyped_storage()._cdata
            ring.append((base, cdata, _use_count(cdata), base.data_ptr()))
            return base.detach()


# torch's count of the holders of a storage (as torch._inductor's cudagraph trees read it); None: not in this torch
_use_count: Callable[[int], int] | None = getattr(torch._C, "_storage_Use_Count", None)


def _new(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor in new memory from `large_buffer` (huge pages from 2 MiB)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if not nbytes:
        return torch.empty(shape, dtype=dtype)
    return torch.from_numpy(large_buffer(nbytes)).view(dtype).view(shape)


def _raise_bad(ids: torch.Tensor, code: int, lo: torch.Tensor, cum: torch.Tensor, t: int, n_rows: int) -> None:
    """The error for stride_gather_ids' result `code` (-2: out of memory; else the batch index of the bad window)."""
    if code == -2:
        raise MemoryError("stride_gather_ids: no memory for a batch's window starts")
    wid, n = int(ids[code]), int(cum[-1])
    if not 0 <= wid < n:
        raise IndexError(f"window id {wid} is outside [0, {n})")
    raise IndexError(f"window id {wid} starts outside [0, {n_rows - t}] for windows of {t} rows")


class WindowGather:
    """x[b] = rows[starts[b] : starts[b] + T] for a batch of window starts, as one [B, T, F] tensor.

    `use_native`: the C kernel where it can be built (False: the numpy path, for comparison);
    `ahead`: windows ahead whose page heads the kernel hints (0: none); `stream`: streaming stores for
    same-dtype and normalised float32 batches (None: for batches at least the size of the L2 cache);
    `lines`: pages copied at once as interleaved streams while every line of the next windows is hinted
    into L2 (True: `LINES`; 0 or False: one window after another).
    """

    def __init__(self, rows: torch.Tensor, seq_len: int, threads: int = 1, *, use_native: bool = True,
                 ahead: int = AHEAD, stream: bool | None = None, lines: int | bool = LINES) -> None:
        if threads < 1:
            raise ValueError(f"gather threads = {threads} must be >= 1")
        if ahead < 0:
            raise ValueError(f"windows read ahead = {ahead} must be >= 0")
        lines = LINES if lines is True else int(lines)
        if not 0 <= lines <= MAX_LINES:
            raise ValueError(f"page streams (lines) = {lines} must be in [0, {MAX_LINES}]")
        self.dtype, self.seq_len, self.threads = rows.dtype, seq_len, threads
        self.ahead, self.stream, self.lines = ahead, stream, lines
        raw = rows.view(torch.int16) if rows.dtype == torch.bfloat16 else rows  # numpy has no bfloat16
        self._raw = raw
        self._rows = raw.numpy()
        self._n, self._f = self._rows.shape
        self._row_bytes = self._rows.strides[0]
        self._contiguous = self._rows.flags.c_contiguous
        self._lib = native.load() if use_native and self._contiguous else None
        self._base = raw.data_ptr()
        self._buffers = BatchBuffers()
        self._views: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._pool: ThreadPoolExecutor | None = None
        if threads > 1 and self._contiguous:
            self._pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="stride-gather")
            if self._lib is None:  # windows as rows of T*F values, overlapping (no copy), for index_select
                self._window_rows = raw.as_strided((max(0, self._n - seq_len + 1), seq_len * self._f), (self._f, 1))

    def close(self) -> None:
        """Stop the helper threads (threads > 1)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    @property
    def native(self) -> bool:
        """Whether batches come from the C kernel."""
        return self._lib is not None

    def __call__(self, starts: np.ndarray | torch.Tensor, *, float32: bool = False,
                 shift: torch.Tensor | None = None, scale: torch.Tensor | None = None) -> torch.Tensor:
        """The windows starting at rows `starts` (int64); `float32`: as float32 (bf16 rows upcast)
        with x - shift, then x * scale, per feature where given (float32 tensors of F values)."""
        return self.with_picks(starts, None, float32=float32, shift=shift, scale=scale)[0]

    def with_picks(self, starts: np.ndarray | torch.Tensor, picks: ColumnPicks | None, *, float32: bool = False,
                   shift: torch.Tensor | None = None, scale: torch.Tensor | None = None,
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The windows (as `__call__`) and, with `picks`, what it reads for each window (`ColumnPicks`)."""
        t = self.seq_len
        convert = float32 and (self.dtype != torch.float32 or shift is not None or scale is not None)
        if self._lib is None:
            return self._numpy_with_picks(np.asarray(starts, dtype=np.int64), picks, convert, shift, scale)
        if not (isinstance(starts, torch.Tensor) and starts.dtype == torch.int64 and starts.is_contiguous()):
            starts = torch.from_numpy(np.ascontiguousarray(starts, dtype=np.int64))  # pointers by data_ptr:
        b = starts.shape[0]  # a numpy array's .ctypes.data costs 2.4 us (AMD EPYC), a tensor's data_ptr 0.14
        p = self._buffers.empty((b, picks.width), picks.dtype) if picks is not None else None
        out = self._buffers.empty((b, t, self._f), torch.float32 if convert else self.dtype)
        bad = [r for r in self._split(self._native_part(starts, out, convert, shift, scale, picks, p), b) if r >= 0]
        if bad:
            raise IndexError(f"window start {int(starts[bad[0]])} is outside [0, {self._n - t}] for windows "
                             f"of {t} rows")
        return out, p

    def id_batches(self, lo: torch.Tensor, cum: torch.Tensor, picks: ColumnPicks | None, *, float32: bool = False,
                   shift: torch.Tensor | None = None, scale: torch.Tensor | None = None,
                   ) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]] | None:
        """A function of a batch's window ids (int64, contiguous) -> (windows, picks), as `with_picks` of their
        first rows, in one C call a batch (None without the kernel). Window ids map to end rows through k
        ranges: `lo` [k] their first end rows, `cum` [k + 1] their first ids (`RowWindows`).

        Why one call: every Python step after a 2-4 MiB copy finds its code and data evicted from L2. Around
        a bf16 batch's 182 us copy, the ids-to-rows call and `with_picks`' Python took 44 us (5 us warm) on
        an Intel Xeon (KVM, 40 shuffled rounds); this path keeps two allocations and one call."""
        if self._lib is None:
            return None
        t, f = self.seq_len, self._f
        convert = float32 and (self.dtype != torch.float32 or shift is not None or scale is not None)
        sh = shift.contiguous() if convert and shift is not None else None
        sc = scale.contiguous() if convert and scale is not None else None
        lo, cum = lo.contiguous(), cum.contiguous()
        ctx = native.Gather(self._base, self._row_bytes, self._n - t, t, f, self.ahead,
                            -1 if self.stream is None else int(self.stream), int(self.lines), _L2, int(convert),
                            int(self.dtype == torch.bfloat16), sh.data_ptr() if sh is not None else None,
                            sc.data_ptr() if sc is not None else None, lo.data_ptr(), cum.data_ptr(),
                            lo.shape[0], ctypes.pointer(picks.struct) if picks is not None else None)
        ref, fn, empty = ctypes.byref(ctx), self._lib.stride_gather_ids, self._buffers.empty
        out_dtype = torch.float32 if convert else self.dtype
        p_width, p_dtype = (picks.width, picks.dtype) if picks is not None else (0, None)
        pool, n_rows = self._pool, self._n

        def batch(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
            b = ids.shape[0]
            p = empty((b, p_width), p_dtype) if p_dtype is not None else None
            out = empty((b, t, f), out_dtype)
            ip, op, pp = ids.data_ptr(), out.data_ptr(), p.data_ptr() if p is not None else None
            if pool is None or b < 2 * self.threads:
                r = fn(ref, ip, b, 0, b, op, pp)
                bad = [r] if r != -1 else ()
            else:
                bad = [r for r in self._split(lambda a, z: fn(ref, ip, b, a, z, op, pp), b) if r != -1]
            if bad:
                _raise_bad(ids, min(bad), lo, cum, t, n_rows)
            return out, p

        batch.keep = (ctx, sh, sc, lo, cum, picks)  # type: ignore[attr-defined]  # alive while batches are made
        return batch

    def _numpy_with_picks(self, starts: np.ndarray, picks: ColumnPicks | None, convert: bool,
                          shift: torch.Tensor | None, scale: torch.Tensor | None,
                          ) -> tuple[torch.Tensor, torch.Tensor | None]:
        t = self.seq_len
        if len(starts) and (starts.min() < 0 or starts.max() > self._n - t):
            raise IndexError(f"window starts outside [0, {self._n - t}] for windows of {t} rows")
        if picks is not None and picks.log_column is not None:
            raise ValueError("log-price targets are read by the C kernel only")
        p = torch.from_numpy(picks.numpy(starts)) if picks is not None else None
        x = self._numpy_gather(starts)
        if not convert:
            return x, p
        x = x.float() if x.dtype != torch.float32 else x
        xn = x.numpy()  # in place, single-threaded, like the gather
        if shift is not None:
            np.subtract(xn, shift.numpy(), out=xn)
        if scale is not None:
            np.multiply(xn, scale.numpy(), out=xn)
        return x, p

    def _native_part(self, starts: torch.Tensor, out: torch.Tensor, convert: bool, shift: torch.Tensor | None,
                     scale: torch.Tensor | None, picks: ColumnPicks | None,
                     p: torch.Tensor | None):  # noqa: ANN202
        """part(a, z): windows a..z-1 into their rows of `out`; the first bad start's index, or -1."""
        lib, base, t, f = self._lib, self._base, self.seq_len, self._f
        win_bytes, last = t * f * out.element_size(), self._n - t
        sp, op, ahead, lines = starts.data_ptr(), out.data_ptr(), self.ahead, int(self.lines)
        pk, pp, pstep = (None, 0, 0) if picks is None or p is None else \
            (picks.ref, p.data_ptr(), p.shape[1] * p.element_size())
        nt = int(self.stream if self.stream is not None else out.numel() * out.element_size() >= _L2)
        if not convert:
            def part(a: int, z: int) -> int:
                r = lib.stride_copy_windows(base, self._row_bytes, sp + 8 * a, z - a, last, win_bytes,
                                            op + a * win_bytes, ahead, nt, pk, pp + pstep * a if pk else None, lines)
                return r + a if r >= 0 else -1
            return part
        bf16 = int(self.dtype == torch.bfloat16)
        sh = shift.contiguous() if shift is not None else None
        sc = scale.contiguous() if scale is not None else None
        shp, scp = (sh.data_ptr() if sh is not None else None), (sc.data_ptr() if sc is not None else None)

        def part_f32(a: int, z: int) -> int:
            r = lib.stride_windows_f32(base, bf16, sp + 8 * a, z - a, last, t, f, shp, scp, op + a * win_bytes,
                                       ahead, pk, pp + pstep * a if pk else None, lines, nt)
            return r + a if r >= 0 else -1
        part_f32.keep = (sh, sc)  # type: ignore[attr-defined]  # alive while the copy runs
        return part_f32

    def _split(self, part, b: int) -> list:  # noqa: ANN001
        """part(a, z) over [0, b): on this thread, or in `threads` slices side by side; their results."""
        if self._pool is None or b < 2 * self.threads:
            return [part(0, b)]
        edges = np.linspace(0, b, self.threads + 1).astype(np.int64).tolist()
        futures = [self._pool.submit(part, a, z) for a, z in zip(edges[1:-1], edges[2:], strict=True)]
        first = part(edges[0], edges[1])
        return [first, *[fut.result() for fut in futures]]

    # -- the numpy fallback ------------------------------------------------------------------
    def _view(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows as overlapping items of T/k rows (item s = rows s..s+T/k-1), and each sub-block's offset."""
        if k not in self._views:
            length = self.seq_len // k
            self._views[k] = (np.ndarray(shape=(max(0, self._n - length + 1),),
                                         dtype=np.dtype((np.void, length * self._row_bytes)),
                                         buffer=self._rows, strides=(self._row_bytes,)),
                              np.arange(0, self.seq_len, length))
        return self._views[k]

    def _blocks(self, b: int) -> int:
        """Sub-blocks per window for a batch of b: the fewest that let numpy release the GIL."""
        t = self.seq_len
        return next((d for d in range(1, t + 1) if t % d == 0 and b * d >= GIL_FREE_MIN_INDICES), t)

    def _numpy_gather(self, starts: np.ndarray) -> torch.Tensor:
        b, t = len(starts), self.seq_len
        if self._pool is not None:
            x = self._split_index_select(starts)
        elif self._contiguous:
            view, offsets = self._view(self._blocks(b))
            x = torch.from_numpy(view[(starts[:, None] + offsets).reshape(-1)].view(self._rows.dtype)
                                 .reshape(b, t, self._f))  # the one copy
        else:  # a strided table (not a store or a derived file): one take of B*T rows
            x = torch.from_numpy(np.take(self._rows, (starts[:, None] + np.arange(t)).reshape(-1), axis=0)
                                 .reshape(b, t, self._f))
        return x.view(torch.bfloat16) if self.dtype == torch.bfloat16 else x

    def _split_index_select(self, starts: np.ndarray) -> torch.Tensor:
        b = len(starts)
        out = torch.empty((b, self.seq_len * self._f), dtype=self._window_rows.dtype)
        idx = torch.from_numpy(starts)

        def part(a: int, z: int) -> None:
            torch.index_select(self._window_rows, 0, idx[a:z], out=out[a:z])

        self._split(part, b)
        return out.view(b, self.seq_len, self._f)
