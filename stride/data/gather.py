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
"""

from __future__ import annotations

import numpy as np
import torch

GIL_FREE_MIN_INDICES = 501  # numpy keeps the GIL for fancy indexes of <= 500 items


class WindowGather:
    """x[b] = rows[starts[b] : starts[b] + T] for a batch of window starts, as one [B, T, F] tensor."""

    def __init__(self, rows: torch.Tensor, seq_len: int) -> None:
        self.dtype, self.seq_len = rows.dtype, seq_len
        raw = rows.view(torch.int16) if rows.dtype == torch.bfloat16 else rows  # numpy has no bfloat16
        self._rows = raw.numpy()
        self._n, self._f = self._rows.shape
        self._row_bytes = self._rows.strides[0]
        self._contiguous = self._rows.flags.c_contiguous
        self._views: dict[int, tuple[np.ndarray, np.ndarray]] = {}

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
        if self._contiguous:
            view, offsets = self._view(self._blocks(b))
            flat = view[(starts[:, None] + offsets).reshape(-1)].view(self._rows.dtype)  # the one copy
        else:  # a strided table (not a store or a derived file): one take of B*T rows
            flat = np.take(self._rows, (starts[:, None] + np.arange(t)).reshape(-1), axis=0)
        x = torch.from_numpy(flat.reshape(b, t, self._f))
        return x.view(torch.bfloat16) if self.dtype == torch.bfloat16 else x
