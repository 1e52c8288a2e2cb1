"""A batch of windows as one copy: a numpy fancy index over an overlapping view of the rows.

Why windows, not rows: a window is T consecutive rows, contiguous in a row-major table, so it can be
copied as one block; the previous gather (`numpy.take` of B*T single rows) paid per-row overhead.
`WindowGather` views the [N, F] rows as an overlapping array of N-T+1 items of T*F values each (item
s starts at row s: no copy), and indexes it with the batch's window starts.

Why numpy, and k sub-blocks per window: numpy releases the GIL in a fancy index only above 500
indices (`NPY_BEGIN_THREADS_THRESHOLDED` in its `mapiter_trivial_get`), so a batch of 256 windows
would hold the GIL for the whole copy and stall the model's thread. Each window is therefore split
into k equal consecutive sub-blocks (k the smallest divisor of T with B*k > 500). Measured beside a
Python loop on the main thread: k=1 halved the loop's rate, k=2 left it as fast as beside a
sleeping thread.

What was tried against it, side by side (`benchmarks/data_loader.py` prints the table; docs/data.md
has the figures): numpy row `take` (the previous gather) is 1.0-1.35x slower per CPU-second of the
gathering thread (shuffled A/B runs at load 6-23 on 2 cores); the same into a reused buffer gains
nothing (glibc hands back the same freed memory: no page faults to save); torch `index_select` over
a strided window view is about as fast (0.9-1.2x) on one OpenMP thread and 0.2 GB/s with torch's
2-thread team under load; two threads per batch are several times slower on 2 shared cores; sorting the starts
gains nothing. So: one thread, fresh output, the sampler's order.

`threads` > 1 (`data.gather_threads`) splits a batch over that many threads, each a
`torch.index_select` (GIL released) of its windows into its rows of one output. For hosts with cores
and memory bandwidth to spare (a GPU node feeding one device); on the 2-core development box it gave
0.99x of one thread on an idle machine (one core already takes what the memory system gives), so the
default stays 1.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

GIL_FREE_MIN_INDICES = 501  # numpy keeps the GIL for fancy indexes of <= 500 items


class WindowGather:
    """x[b] = rows[starts[b] : starts[b] + T] for a batch of window starts, as one [B, T, F] tensor."""

    def __init__(self, rows: torch.Tensor, seq_len: int, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"gather threads = {threads} must be >= 1")
        self.dtype, self.seq_len, self.threads = rows.dtype, seq_len, threads
        raw = rows.view(torch.int16) if rows.dtype == torch.bfloat16 else rows  # numpy has no bfloat16
        self._rows = raw.numpy()
        self._n, self._f = self._rows.shape
        self._row_bytes = self._rows.strides[0]
        self._contiguous = self._rows.flags.c_contiguous
        self._views: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._pool: ThreadPoolExecutor | None = None
        if threads > 1 and self._contiguous:  # windows as rows of T*F values, overlapping (no copy)
            self._window_rows = raw.as_strided((max(0, self._n - seq_len + 1), seq_len * self._f), (self._f, 1))
            self._pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="stride-gather")

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

    def __call__(self, starts: np.ndarray) -> torch.Tensor:
        b, t = len(starts), self.seq_len
        starts = np.asarray(starts, dtype=np.int64)
        if b and (starts.min() < 0 or starts.max() > self._n - t):
            raise IndexError(f"window starts outside [0, {self._n - t}] for windows of {t} rows")
        if self._pool is not None:
            x = self._split_gather(starts)
            return x.view(torch.bfloat16) if self.dtype == torch.bfloat16 else x
        if self._contiguous:
            view, offsets = self._view(self._blocks(b))
            flat = view[(starts[:, None] + offsets).reshape(-1)].view(self._rows.dtype)  # the one copy
        else:  # a strided table (not a store or a derived file): one take of B*T rows
            flat = np.take(self._rows, (starts[:, None] + np.arange(t)).reshape(-1), axis=0)
        x = torch.from_numpy(flat.reshape(b, t, self._f))
        return x.view(torch.bfloat16) if self.dtype == torch.bfloat16 else x

    def _split_gather(self, starts: np.ndarray) -> torch.Tensor:
        """The batch's windows in `threads` parts, gathered side by side into one [B, T, F] output."""
        assert self._pool is not None
        b = len(starts)
        out = torch.empty((b, self.seq_len * self._f), dtype=self._window_rows.dtype)
        idx = torch.from_numpy(starts)
        edges = np.linspace(0, b, self.threads + 1).astype(np.int64).tolist()
        parts = [(a, z) for a, z in zip(edges, edges[1:], strict=False) if z > a]
        futures = [self._pool.submit(torch.index_select, self._window_rows, 0, idx[a:z], out=out[a:z])
                   for a, z in parts[1:]]
        if parts:
            a, z = parts[0]
            torch.index_select(self._window_rows, 0, idx[a:z], out=out[a:z])  # this thread's part
        for f in futures:
            f.result()
        return out.view(b, self.seq_len, self._f)
