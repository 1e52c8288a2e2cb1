"""Fused kernels with PyTorch fallbacks: pick an op set with `get_ops("torch" | "triton" | "compile")`.

Ops: rms_norm, layer_norm, swiglu, rope, ts_loss (MSE / Huber / pinball over horizons) and a
chunked linear_cross_entropy. See docs/kernels.md for what each saves and how it was measured.
"""

from __future__ import annotations

from stride.kernels.ops import KERNEL_CHOICES, KernelOps, get_ops
from stride.kernels.runtime import interpreter_enabled, triton_available

__all__ = ["KERNEL_CHOICES", "KernelOps", "get_ops", "interpreter_enabled", "triton_available"]
