"""Device peak FLOP/s for MFU: datasheet for known GPUs, a measured matmul peak on CPU.

Every value says where it came from (`source`), because MFU is only as meaningful as its peak.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from stride.config.dtypes import PRECISION_DTYPES

# Dense (no sparsity) peak TFLOP/s by dtype from vendor datasheets (SXM parts).
GPU_PEAKS_TFLOPS: dict[str, dict[str, float]] = {
    "H200": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
    "H100": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4},
    "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
    "B200": {"fp32": 80.0, "tf32": 1100.0, "bf16": 2250.0, "fp16": 2250.0},
    "L4": {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0},
    "A10": {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
}


@dataclass
class Peak:
    flops_per_s: float
    source: str  # e.g. "datasheet:H100:bf16" or "measured:cpu-matmul:fp32:2threads"


def _dtype_name(precision: str) -> str:
    return {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}[precision]


def measured_matmul_peak(device: torch.device, dtype: torch.dtype, n: int = 1024, seconds: float = 0.3) -> float:
    """Best observed FLOP/s of an n x n matmul, a practical ceiling for dense compute on this device."""
    # Its own generator: measuring the peak must not move the training RNG (a first run in a process
    # would otherwise draw different dropout masks from later ones).
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    for _ in range(2):
        a @ b
    best = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        for _ in range(4):
            a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = max(best, 4 * 2 * n**3 / (time.perf_counter() - t0))
    return best


_CACHE: dict[tuple[str, str, int], Peak] = {}


def device_peak(device: torch.device, precision: str, override: float | None = None) -> Peak:
    if override is not None:
        return Peak(override, "config:metrics.peak_flops")
    dt = _dtype_name(precision)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        # fp32 matmuls run on tensor cores as tf32 when allowed; count against that peak then.
        if dt == "fp32" and torch.backends.cuda.matmul.allow_tf32:
            dt = "tf32"
        for key, peaks in GPU_PEAKS_TFLOPS.items():
            if key in name:
                return Peak(peaks[dt] * 1e12, f"datasheet:{key}:{dt}")
    key = (str(device), dt, torch.get_num_threads())
    if key not in _CACHE:
        flops = measured_matmul_peak(device, PRECISION_DTYPES[dt])
        _CACHE[key] = Peak(flops, f"measured:{device.type}-matmul-1024:{dt}:{torch.get_num_threads()}threads")
    return _CACHE[key]
