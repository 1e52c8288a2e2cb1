"""The best observed FLOP/s of a square matmul in one dtype: the library's kernel speed on this device.

Below both `stride.metrics.peak` (the fallback peak, the dtype comparison) and `stride.metrics.cpu_isa`
(the clock a one-core GEMM implies), which both time it this way.
"""

from __future__ import annotations

import time

import torch


def measured_matmul_peak(device: torch.device, dtype: torch.dtype, n: int = 1024, seconds: float = 0.3) -> float:
    """Best observed FLOP/s of an n x n matmul: how fast this library's kernel for `dtype` is here.

    Not a ceiling for MFU (a slow kernel gives a low figure; CPU fp16 without AVX512_FP16 runs at
    well under 1 GFLOP/s): it is the fallback peak where no datasheet or clock is known, and what
    `stride.metrics.dtype_speed` compares dtypes with. One matmul at a time, so a slow dtype costs
    about one matmul past `seconds`."""
    # Its own generator: measuring the peak must not move the training RNG (a first run in a process
    # would otherwise draw different dropout masks from later ones).
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    a @ b  # warm-up
    best = 0.0
    deadline = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t1 = time.perf_counter()
        best = max(best, 2 * n**3 / (t1 - t0))
        if t1 >= deadline:
            return best
