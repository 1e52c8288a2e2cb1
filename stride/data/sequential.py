"""Every window of a store split in time order, for evaluation and backtests: one slab copy per batch.

Why a separate iterator: consecutive windows overlap in T-1 of their T rows, so a batch of n
consecutive windows is n+T-1 distinct rows. `SequentialWindows` copies those rows once and hands
out x = slab.unfold(...) ([n, T, F], an overlapping view, no per-window copy): 1/85 of the bytes of
the window gather at n=256, T=128. Batches never cross a run (a symbol, or a day unless
`cross_days`), so a batch holds up to `batch_size` windows; the values equal the window gather's.
`contiguous=True` materialises each view from the slab (reads from cache, writes to memory: still
several times cheaper than the window gather's random reads) for consumers that need dense input.
It does not apply to shuffled training batches: their windows start at random rows (in a 256 MiB
store two of 256 windows overlap about 4 times a batch), so there is no shared slab to copy once.

On a GPU, `windows_to_device` moves only the slab (n+T-1 rows) and rebuilds the view there.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from stride.data.loader import Batch, prefetched
from stride.data.windows import RowWindows


class SequentialWindows:
    """All windows of `source` in window-id (time) order, as batches of up to `batch_size` windows of one run."""

    def __init__(self, source: RowWindows, batch_size: int, *, prefetch: int = 0, pin_memory: bool = False,
                 contiguous: bool = False) -> None:
        if batch_size < 1:
            raise ValueError(f"batch size {batch_size} must be >= 1")
        self.source, self.batch_size, self.prefetch, self.contiguous = source, batch_size, prefetch, contiguous
        self.pin_memory = pin_memory and torch.cuda.is_available()
        runs = source.runs()
        self._batches = [(int(e), int(min(hi, e + batch_size) - e)) for lo, hi in runs
                         for e in range(int(lo), int(hi), batch_size)]

    def __len__(self) -> int:
        return len(self._batches)

    def _iter(self) -> Iterator[Batch]:
        for first_end, n in self._batches:
            yield self.source.gather_run(first_end, n, pin=self.pin_memory, contiguous=self.contiguous)

    def __iter__(self) -> Iterator[Batch]:
        return prefetched(self._iter, self.prefetch) if self.prefetch > 0 else self._iter()


def windows_to_device(x: torch.Tensor, device: torch.device | str, non_blocking: bool = False) -> torch.Tensor:
    """Move a batch to `device`; an overlapping view (SequentialWindows) moves only the memory it spans.

    `x.to(device)` would first materialise every window on the host (n*T rows), the copy the slab saved.
    """
    device = torch.device(device)
    if x.device == device or x.is_contiguous() or any(s < 0 for s in x.stride()):
        return x.to(device, non_blocking=non_blocking)
    span = 1 + sum((n - 1) * s for n, s in zip(x.shape, x.stride(), strict=True))
    flat = x.as_strided((span,), (1,), x.storage_offset()).to(device, non_blocking=non_blocking)
    return flat.as_strided(x.shape, x.stride(), 0)


__all__ = ["SequentialWindows", "windows_to_device"]
