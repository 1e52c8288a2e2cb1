"""Where Triton kernels can run, and the launch sizes they use.

Triton runs on a CUDA device, or on the CPU under its interpreter when `TRITON_INTERPRET=1` is set
explicitly (the tests do that). Asking for Triton anywhere else falls back to the PyTorch reference
with a one-line notice, so a CPU run never crawls through the interpreter by accident.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import math
import os

import torch

log = logging.getLogger("stride.kernels")

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_ROW_WIDTH = 65536  # one row must fit one program's registers (normalisation kernels)


@functools.cache
def triton_importable() -> bool:
    return importlib.util.find_spec("triton") is not None


def interpreter_enabled() -> bool:
    """True when the user (or a test) asked for Triton's CPU interpreter explicitly."""
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def triton_available() -> bool:
    """Triton can run kernels somewhere here: a CUDA device, or the interpreter asked for explicitly."""
    return triton_importable() and (torch.cuda.is_available() or interpreter_enabled())


def triton_runs_on(*tensors: torch.Tensor) -> bool:
    """Triton can take these tensors: all on CUDA, or all on the CPU under the interpreter."""
    if not triton_importable():
        return False
    if all(t.is_cuda for t in tensors):
        return True
    return interpreter_enabled() and all(t.device.type == "cpu" for t in tensors)


_noticed: set[str] = set()


def notice_once(key: str, message: str) -> None:
    """Say once per process, on one line, that a fallback is in use, so long runs are not flooded.

    Through logging only (without a configured handler Python prints the bare message to stderr): a
    `warnings.warn` beside it printed the notice a second time, with a file name and a source line."""
    if key in _noticed:
        return
    _noticed.add(key)
    log.warning(message)


@functools.lru_cache(maxsize=256)
def _constant(values: tuple[float, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype, device=device)


def device_constant(values: tuple[float, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small constant tensor (a loss's quantiles) on `device`, made once per process and then reused.

    Why: `torch.tensor(values, device="cuda")` copies from pageable memory and waits for the stream to
    drain, every call. In ts_loss that was a device sync per training step, and it broke CUDA-graph
    capture (the H200 run of 2026-12-04 timed the fused ts_loss at 0.81 ms as launched, 18x compile's
    0.045 ms). Callers must not write into the tensor."""
    return _constant(tuple(float(v) for v in values), dtype, str(device))


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def row_tile(n_cols: int) -> tuple[int, int, int]:
    """(BLOCK_M rows, BLOCK_N cols, num_warps) for row-wise kernels: ~4-8K elements per program."""
    block_n = next_pow2(n_cols)
    block_m = max(1, min(16, 4096 // block_n))
    num_warps = 4 if block_n * block_m <= 4096 else 8 if block_n <= 16384 else 16
    return block_m, block_n, num_warps


def reduction_programs(n_tiles: int, device: torch.device, per_sm: int = 1) -> int:
    """Programs for kernels that also reduce over rows (weight grads): `per_sm` per SM (each loops over row
    tiles, keeping the [programs, D] partial-sum buffer small next to x), few under the interpreter."""
    if device.type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        return max(1, min(n_tiles, per_sm * sms))
    return max(1, min(n_tiles, 4))


def check_float(name: str, t: torch.Tensor) -> None:
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name}: dtype {t.dtype} is not supported; use float32, bfloat16 or float16")


def as_rows(name: str, x: torch.Tensor, width: int) -> torch.Tensor:
    """x [..., width] as a contiguous [rows, width] matrix (copies a non-contiguous input once)."""
    if x.dim() == 0 or x.shape[-1] != width:
        raise ValueError(f"{name}: last dimension must be {width}, got shape {tuple(x.shape)}")
    if width > MAX_ROW_WIDTH:
        raise ValueError(f"{name}: row width {width} exceeds the kernel limit {MAX_ROW_WIDTH}")
    # rows given, not -1: with width 0 view(-1, 0) was ambiguous (a RuntimeError that named no op)
    return x.contiguous().view(math.prod(x.shape[:-1]), width)
