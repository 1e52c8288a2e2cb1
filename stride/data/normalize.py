"""Feature normalisation that only uses the past: expanding statistics per symbol, or train-split fits.

`expanding`: each row is z-scored with the mean and std of its symbol's rows up to and including it
(running float64 sums), so changing a later value cannot change an earlier feature. The result is a
derived float32 memory map written once next to the store (chunked; memory is one chunk).
`train`: one mean and std per column over the rows of the training split, applied after the gather.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import numpy as np
import torch

CHUNK = 1 << 16


def train_stats(features: torch.Tensor, row_ranges: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, 1/std) per column over the given row ranges, in float64, read chunk by chunk."""
    f = features.shape[1]
    s, s2, n = np.zeros(f), np.zeros(f), 0
    for lo, hi in row_ranges:
        for a in range(lo, hi, CHUNK):
            x = features[a : min(hi, a + CHUNK)].double().numpy()
            s += x.sum(0)
            s2 += (x * x).sum(0)
            n += len(x)
    if n == 0:
        raise ValueError("no training rows to fit normalisation statistics on")
    mean = s / n
    std = np.sqrt(np.maximum(s2 / n - mean**2, 0.0))
    inv = np.where(std > 1e-12, 1.0 / np.where(std > 1e-12, std, 1.0), 1.0)
    return torch.tensor(mean, dtype=torch.float32), torch.tensor(inv, dtype=torch.float32)


def expanding_zscore(x: np.ndarray, state: tuple[np.ndarray, np.ndarray, int] | None = None,
                     eps: float = 1e-8) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, int]]:
    """Z-score rows of x [n, F] by the running mean/std of all rows up to each one (and `state` before).

    Returns the normalised rows and the running (sum, sum of squares, count) to carry on.
    """
    x64 = x.astype(np.float64)
    s0, q0, n0 = state if state is not None else (np.zeros(x.shape[1]), np.zeros(x.shape[1]), 0)
    s = s0 + np.cumsum(x64, axis=0)
    q = q0 + np.cumsum(x64 * x64, axis=0)
    cnt = (n0 + np.arange(1, len(x) + 1))[:, None]
    mean = s / cnt
    var = np.maximum(q / cnt - mean**2, 0.0)
    std = np.where(cnt > 1, np.sqrt(var), 1.0)
    z = (x64 - mean) / (std + eps)
    return z.astype(np.float32), (s[-1], q[-1], int(cnt[-1, 0]))


def derived_features(values: torch.Tensor, store_path: Path, values_sha: str, cols: list[int],
                     segments: tuple[np.ndarray, np.ndarray], mode: str) -> torch.Tensor:
    """A [rows, len(cols)] float32 memory map of the chosen columns, raw (`select`) or `expanding`.

    Cached under <store>/derived/, keyed by the data's checksum, the columns and the mode; written to
    a temporary name and renamed, so a half-written cache is never used.
    """
    key = hashlib.sha256(f"{values_sha}|{cols}|{mode}|v1".encode()).hexdigest()[:16]
    out_dir = store_path / "derived"
    out = out_dir / f"{mode}-{key}.f32"
    n = values.shape[0]
    if not out.exists():
        out_dir.mkdir(exist_ok=True)
        tmp = out_dir / f".tmp-{out.name}-{uuid.uuid4().hex[:8]}"
        dst = np.memmap(tmp, dtype=np.float32, mode="w+", shape=(n, len(cols)))
        idx = torch.tensor(cols)
        for lo, hi in zip(*segments, strict=True):
            state = None
            for a in range(int(lo), int(hi), CHUNK):
                b = min(int(hi), a + CHUNK)
                x = values[a:b].index_select(1, idx).float().numpy()
                if mode == "expanding":
                    x, state = expanding_zscore(x, state)
                dst[a:b] = x
        dst.flush()
        del dst
        os.replace(tmp, out)
    arr = np.memmap(out, dtype=np.float32, mode="c", shape=(n, len(cols)))
    return torch.from_numpy(arr)
