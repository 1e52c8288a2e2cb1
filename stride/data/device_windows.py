"""Windows gathered on the device: the training split's rows live there and a batch is one index kernel.

The common quant case fits: 64 assets x 250 days x 390 minutes x 32 features in float32 is 0.8 GB,
under 1% of an H200. `DeviceWindows(source, device)` copies what the split's windows read once (the
rows each run of windows reads, history included, concatenated; already upcast and normalised as the
host path makes a batch, by the same float32 operations, so the same bits), a table of each window's
first row, and a table of each window's targets computed by the host path's own function. A batch
is then the window ids (moved to the device by the loader 64 batches at a time, `stage_ids`) and one
kernel that looks up each window's first row and copies its T x F block and its targets
(stride.kernels.triton_window_gather, on CUDA), or,
without Triton, `index_select`s over an overlapping [M - T + 1, T, F] view of the rows: no host copy,
no pinned staging, no prefetch thread, no data wait. The loader around it (`ShardedLoader`) is the host
path's: the same order, sharding and resumable state, so a run resumes exactly on either path.
`fits()` says whether it takes at most `DEVICE_FRACTION` of the device's free memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from stride.data.loader import Batch
from stride.kernels.runtime import triton_importable, triton_runs_on

# Share of the free device memory the split may take under "auto": the model, its optimizer state
# (AdamW: three copies of the parameters), its activations and the allocator's cache need the rest,
# and they are not known before the first step; a split that leaves too little fails at start-up,
# not mid-run. A user who knows better sets `data.device_resident = true`.
DEVICE_FRACTION = 0.25
CHUNK_ROWS = 1 << 18  # rows copied to the device at a time (host memory stays one chunk)


def device_bytes(source: Any) -> int:
    """Device memory the split takes: its rows in the batch dtype, start rows and targets."""
    rows, n = source.device_row_count(), len(source)
    return rows * source.device_row_bytes() + n * 8 + n * source.n_targets * 4


def fits(source: Any, device: torch.device) -> tuple[bool, str]:
    """(whether `data.device_resident = "auto"` puts the split on `device`, why)."""
    if device.type != "cuda":
        return False, f"off: the device is {device.type}, where the host path already gathers on the device"
    free = torch.cuda.mem_get_info(device)[0]
    need = device_bytes(source)
    ok = need <= DEVICE_FRACTION * free
    return ok, (f"{'on' if ok else 'off'}: the split takes {need / 2**30:.2f} GiB, "
                f"{'within' if ok else 'more than'} {DEVICE_FRACTION:.0%} of the {free / 2**30:.1f} GiB free")


class DeviceWindows:
    """The windows of `source` (a RowWindows or ArrayWindows), gathered on `device`.

    `impl`: "triton" (one kernel a batch; the default on CUDA where Triton imports, and on the CPU only when
    asked, under Triton's interpreter) or "torch" (`index_select`s; the default elsewhere). Both give the same
    bits: the gather copies, it computes nothing."""

    def __init__(self, source: Any, device: torch.device | str, impl: str = "auto") -> None:
        self.device = torch.device(device)
        if impl == "auto":
            impl = "triton" if self.device.type == "cuda" and triton_importable() else "torch"
        if impl not in ("triton", "torch"):
            raise ValueError(f"DeviceWindows: impl must be 'auto', 'triton' or 'torch', got {impl!r}")
        self.impl = impl
        self.seq_len = source.seq_len
        rows = source.device_rows(self.device, CHUNK_ROWS)  # [M, F] on the device, as batches hold them
        m, f = rows.shape
        self.rows = rows
        self.windows = rows.as_strided((max(0, m - self.seq_len + 1), self.seq_len, f), (f, f, 1))
        n = len(source)
        starts = np.empty(n, np.int64)
        targets = torch.empty((n, source.n_targets), dtype=torch.float32)
        for a in range(0, n, CHUNK_ROWS):  # the host path's own arithmetic, chunk by chunk
            ids = torch.arange(a, min(n, a + CHUNK_ROWS))
            starts[a : a + len(ids)] = source.device_starts(ids.numpy())
            targets[a : a + len(ids)] = source.window_targets(ids)
        self.starts = torch.from_numpy(starts).to(self.device)
        self.targets = targets.to(self.device)
        self._n = n
        if self.impl == "triton" and not triton_runs_on(self.rows):
            raise RuntimeError(f"DeviceWindows: impl='triton' on {self.device} needs CUDA, or Triton's interpreter "
                               "(TRITON_INTERPRET=1) on the CPU")

    def __len__(self) -> int:
        return self._n

    def batch_signature(self) -> str:
        return f"device:{self.rows.dtype}"

    def stage_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Window ids (a chunk of batches' worth, from the loader's host sampler) on the device, in one copy.

        Pinned first: from pageable memory the ids' copy to a GPU blocks the host until the device has caught
        up, and the device then waits for the host to launch the gather (0.057 ms a 256-window batch on an
        H200, 3x a copy of its bytes). The pinned block comes from torch's caching host allocator, which
        keeps it until the copy that reads it is done."""
        if self.device.type == "cuda" and ids.device.type == "cpu" and not ids.is_pinned():
            ids = ids.pin_memory()
        return ids.to(self.device, non_blocking=True)

    def gather(self, idx: torch.Tensor) -> Batch:
        i = self.stage_ids(idx)  # a no-op for ids the loader staged already
        if self.impl == "triton":
            from stride.kernels.triton_window_gather import gather_windows  # imports triton: only when used

            return gather_windows(self.rows, self.starts, self.targets, i.long(), self.seq_len)
        x = self.windows.index_select(0, self.starts.index_select(0, i))  # the one copy
        return x, self.targets.index_select(0, i)
