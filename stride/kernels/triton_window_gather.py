"""A batch of windows gathered on the device in one Triton kernel (the device-resident loader's copy).

Why: a window of T rows x F features is one contiguous block of the row table, so a batch is B block
copies. torch's `index_select` over the overlapping [M - T + 1, T, F] view moves one element per thread
with an index-to-offset division each: on an H200 (2026-12-04) a 4096-window float32 batch (64 MiB) took
0.092 ms with the ids already on the device, 0.35 of a same-size device copy. Here each program copies one
span of one window with wide loads (the window's first element sits at `start * F`, a multiple of 16
elements when F is, which Triton knows from F's specialisation), looks up the window's first row itself,
and the first span's program also copies the window's targets: one launch a batch instead of three.
"""

from __future__ import annotations

import numbers

import torch
import triton
import triton.language as tl

from stride.kernels.runtime import next_pow2

SPAN = 4096  # elements a program copies: 16 KiB of float32, 32 per thread at 4 warps


@triton.jit
def _window_gather_kernel(ROWS, STARTS, TARGETS, IDS, X, Y, width, row_width, n_targets,
                          BLOCK: tl.constexpr, BLOCK_K: tl.constexpr):
    b = tl.program_id(0)
    span = tl.program_id(1)
    wid = tl.load(IDS + b)  # int64
    first = tl.load(STARTS + wid)  # int64: the window's first row in ROWS
    offs = span * BLOCK + tl.arange(0, BLOCK)
    mask = offs < width
    vals = tl.load(ROWS + first * row_width + offs, mask=mask)
    tl.store(X + b.to(tl.int64) * width + offs, vals, mask=mask)
    if span == 0:
        k = tl.arange(0, BLOCK_K)
        kmask = k < n_targets
        tgt = tl.load(TARGETS + wid * n_targets + k, mask=kmask)
        tl.store(Y + b.to(tl.int64) * n_targets + k, tgt, mask=kmask)


def gather_windows(rows: torch.Tensor, starts: torch.Tensor, targets: torch.Tensor, ids: torch.Tensor,
                   seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x [B, seq_len, F] in rows' dtype, y [B, K]) for window ids `ids` [B] (int64, on rows' device):
    x[b] = rows[starts[ids[b]] : starts[ids[b]] + seq_len], y[b] = targets[ids[b]].

    Shapes, dtypes and devices are checked on every call (metadata only). On the CPU (the interpreter) the ids and
    the windows they select are also checked against the tables; on CUDA the caller guarantees them (the loader's
    sampler draws them from range(len(starts)), and a host check would wait for the device at every batch)."""
    if rows.dim() != 2 or not rows.is_contiguous():
        raise ValueError(f"gather_windows: rows must be a contiguous [M, F] table, got shape {tuple(rows.shape)}")
    if ids.dtype != torch.int64 or starts.dtype != torch.int64:
        raise TypeError(f"gather_windows: ids and starts must be int64, got {ids.dtype} and {starts.dtype}")
    if ids.dim() != 1 or starts.dim() != 1:
        raise ValueError(f"gather_windows: ids and starts must be 1-D, got shapes {tuple(ids.shape)} and "
                         f"{tuple(starts.shape)}")
    if targets.dim() != 2 or targets.shape[0] != starts.shape[0]:
        raise ValueError(f"gather_windows: targets must be [windows, K] with windows = len(starts) = "
                         f"{starts.shape[0]}, got shape {tuple(targets.shape)}")
    if isinstance(seq_len, bool) or not isinstance(seq_len, numbers.Integral) or seq_len < 0:
        raise ValueError(f"gather_windows: seq_len must be an int >= 0, got {seq_len!r}")
    seq_len = int(seq_len)
    for name, t in (("starts", starts), ("targets", targets), ("ids", ids)):
        if t.device != rows.device:
            raise ValueError(f"gather_windows: {name} is on {t.device}, rows on {rows.device}: all must share a device")
    # the kernel reads starts[id] and targets[id] at flat offsets: a strided view (a column of a wider table) read
    # the wrong windows (audit 19); copy such a view once, as the targets already were
    starts, targets, ids = starts.contiguous(), targets.contiguous(), ids.contiguous()
    if not rows.is_cuda and ids.numel():
        bad = (ids < 0) | (ids >= starts.shape[0])
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise ValueError(f"gather_windows: ids[{i}] = {int(ids[i])} is not a window in [0, {starts.shape[0]})")
        first = starts[ids]
        over = (first < 0) | (first + seq_len > rows.shape[0])
        if bool(over.any()):
            i = int(over.nonzero()[0, 0])
            raise ValueError(f"gather_windows: window ids[{i}] = {int(ids[i])} spans rows [{int(first[i])}, "
                             f"{int(first[i]) + seq_len}), outside the table's {rows.shape[0]} rows")
    b, f, k = ids.numel(), rows.shape[1], targets.shape[1]
    width = seq_len * f
    x = torch.empty((b, seq_len, f), dtype=rows.dtype, device=rows.device)
    y = torch.empty((b, k), dtype=targets.dtype, device=rows.device)
    if b == 0:
        return x, y
    if width == 0:  # no features to copy, but the targets still: they were left as uninitialised memory (audit 19)
        return x, targets[ids]
    block = min(SPAN, next_pow2(width))
    grid = (b, triton.cdiv(width, block))
    _window_gather_kernel[grid](rows, starts, targets, ids, x, y, width, f, k,
                                BLOCK=block, BLOCK_K=max(2, next_pow2(k)))
    return x, y
