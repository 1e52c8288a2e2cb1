"""Swap the model's norm, gated-MLP and RoPE code and the loss for fused kernels, from outside.

Applied first, before tensor parallelism, checkpointing and compile (see stride.train.apply), so
every later technique wraps the fused ops. `kernels = "torch"` leaves the model untouched; "triton"
without a GPU falls back to torch with a one-line notice (stride.kernels.get_ops), never to the
slow interpreter.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from stride.config.errors import ConfigError
from stride.config.schema import ModelConfig
from stride.kernels.ops import get_ops
from stride.kernels.runtime import interpreter_enabled, triton_available
from stride.models.transformer.layers import Attention, RMSNorm, SwiGLU

# model module -> (its attribute that takes a fused op, the KernelOps field that fills it)
KERNEL_SLOTS: dict[type[nn.Module], tuple[str, str]] = {
    RMSNorm: ("kernel", "rms_norm"),
    SwiGLU: ("kernel", "swiglu"),
    Attention: ("rope_kernel", "rope"),
}


def check_kernels_compile(kernels: str, compile_mode: str) -> None:
    """`train.kernels` = "triton" run by the Triton interpreter (TRITON_INTERPRET=1, no GPU) under `train.compile`:
    dynamo traces the interpreter's Python and fails at the first step (an InterpreterError traceback). Refused up
    front; on a GPU the kernels compile, and without the interpreter "triton" falls back to torch (said once)."""
    if kernels == "triton" and compile_mode != "off" and interpreter_enabled() and triton_available():
        raise ConfigError(
            f"`train.kernels` = 'triton' with `train.compile` = {compile_mode!r} under TRITON_INTERPRET=1: "
            "torch.compile cannot trace the Triton interpreter; set `train.compile` = 'off' (or kernels = "
            "'compile' / 'torch', or run on a GPU without TRITON_INTERPRET)"
        )


def apply_kernels(model: nn.Module, kernels: str) -> tuple[str, int]:
    """Set the fused ops on every module of KERNEL_SLOTS; returns (implementation, modules set)."""
    if kernels == "torch":
        return "torch", 0
    ops = get_ops(kernels)
    if ops.name == "torch":  # fell back (no GPU): the model's own torch code is the same computation
        return "torch", 0
    n = 0
    for m in model.modules():
        slot = next((slot for cls, slot in KERNEL_SLOTS.items() if isinstance(m, cls)), None)
        if slot is not None:
            setattr(m, slot[0], getattr(ops, slot[1]))
            n += 1
    return ops.name, n


def kernel_loss(kernels: str, m: ModelConfig) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None:
    """The fused multi-horizon loss for `[model] loss`, or None to keep the torch loss."""
    if kernels == "torch":
        return None
    ops = get_ops(kernels)
    if ops.name == "torch":
        return None
    q = m.quantiles if m.loss == "quantile" else None
    return lambda pred, y: ops.ts_loss(pred, y, m.loss, delta=m.huber_delta, quantiles=q)
