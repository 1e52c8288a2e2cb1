"""Device peak FLOP/s for MFU: datasheet for known GPUs, the instruction set on CPU.

Every value says where it came from (`source`), because MFU is only as meaningful as its peak. A peak
is a ceiling: when a run achieves more, the peak is wrong, and `mfu_fields` says so loudly and reports
the achieved figure as a lower bound of the peak instead of an MFU above 100 %.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from stride.config.dtypes import PRECISION_DTYPES
from stride.metrics.cpu_isa import isa_peak_with_clock
from stride.metrics.matmul_rate import measured_matmul_peak

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
    source: str  # e.g. "datasheet:H100:bf16" or "isa:fp32:2cores x 2.60GHz x 64FLOP/cycle (avx512f; ...)"
    clock_ghz: float | None = None  # the CPU clock an instruction-set peak is at (None: a datasheet, config, measured)


def _dtype_name(precision: str) -> str:
    return {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}[precision]


_CACHE: dict[tuple[str, str, int], Peak] = {}


def device_peak(device: torch.device, precision: str, override: float | None = None, fresh: bool = False) -> Peak:
    """The peak FLOP/s a run's MFU divides by (datasheet, instruction set, or a measured matmul), cached per
    device, dtype and threads; `fresh`: a CPU's clock measured again (`mfu_fields`' recheck)."""
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
    if key not in _CACHE or (fresh and device.type == "cpu"):
        isa = isa_peak_with_clock(dt, fresh=fresh) if device.type == "cpu" else None
        if isa is not None:
            _CACHE[key] = Peak(isa[0], isa[1], isa[2] / 1e3)
        else:  # an unknown GPU, or a CPU whose clock the OS does not report
            flops = measured_matmul_peak(device, PRECISION_DTYPES[dt])
            _CACHE[key] = Peak(flops, f"measured:{device.type}-matmul-1024:{dt}:{torch.get_num_threads()}threads")
    return _CACHE[key]


class PeakBelowAchievedWarning(UserWarning):
    """A run achieved more FLOP/s than the peak its MFU divides by: the peak is wrong."""


def mfu_fields(achieved: float | None, peak: Peak, recheck: Callable[[], Peak] | None = None) -> dict[str, Any]:
    """The summary's MFU figures. MFU is achieved / peak, never above 1: where a run beats the peak, the peak
    is taken again once through `recheck` (a CPU clock read off a GEMM can have been measured while the core
    ran slower: `stride.metrics.cpu_isa.gemm_clock_mhz`); if the run still beats it, the peak is wrong, so it
    warns (loudly, on stderr), reports the achieved FLOP/s as a lower bound of the peak, leaves `mfu` null
    and says why in `mfu_error`."""
    if achieved and achieved > peak.flops_per_s and recheck is not None:
        peak = recheck()
    # peak_clock_ghz: the clock of a CPU's instruction-set peak as a number, so two runs' peaks can be told apart
    # without parsing the source (`stride compare` says when they differ)
    out: dict[str, Any] = {"peak_flops_per_s": peak.flops_per_s, "peak_flops_source": peak.source,
                           "peak_clock_ghz": peak.clock_ghz,
                           "mfu": achieved / peak.flops_per_s if achieved else None, "mfu_error": None}
    if achieved and achieved > peak.flops_per_s:
        msg = (f"MFU would be {100 * achieved / peak.flops_per_s:.0f} %: this run achieved {achieved:.3e} FLOP/s, "
               f"above the peak {peak.flops_per_s:.3e} ({peak.source}), so that peak is wrong; MFU is left out "
               "and the achieved figure is recorded as a lower bound of the peak (set metrics.peak_flops to the "
               "device's real peak)")
        warnings.warn(msg, PeakBelowAchievedWarning, stacklevel=2)
        out.update(peak_flops_per_s=achieved, peak_flops_source=f"lower-bound:achieved by this run (not {peak.source})",
                   peak_clock_ghz=None, mfu=None, mfu_error=msg)
    return out
