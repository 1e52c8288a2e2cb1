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

What was tried and measured against this, side by side (`benchmarks/data_loader.py` prints the
table; 256 MiB and 2 GiB stores, 32 float32 columns, T=128, B=256, load 6-10 on 2 cores, medians
of 150 shuffled repetitions, GB/s at 256 MiB / 2 GiB): this gather 8.8 / 7.0; numpy row `take`
(previous) 7.0 / 5.3, the same into a reused buffer 7.0 / 5.5; torch `index_select` of windows 7.7 /
6.4 (and only on one OpenMP thread: with the 2-thread team it fell to 0.2 GB/s under load), into a
reused buffer 7.5 / 5.9, split over 2 threads 6.2 / 4.7; starts sorted first 8.7 / 7.0; a plain
numpy copy of the same bytes 8.9 / 8.0. So: no output-buffer reuse (glibc already hands back the
same freed memory, no page faults to save), no second thread (two cores shared with others), no
sorting (order within a batch stays that of the sampler).
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
