"""The op set a model uses, chosen by `[train] kernels = "torch" | "triton" | "compile"`.

`get_ops` returns a `KernelOps` whose fields share one signature across the three choices, so a model
calls `ops.rms_norm(x, w)` without knowing which implementation runs. Triton modules are imported
only when a Triton op is first called: `import stride.kernels` stays cheap and works without Triton,
and the interpreter setting (`TRITON_INTERPRET=1`) is read at that first call, not at import.
"""

from __future__ import annotations

import functools
import importlib
import typing
from collections.abc import Callable
from dataclasses import dataclass

import torch

from stride.config.schema import Kernels
from stride.kernels import linear_ce, reference
from stride.kernels.compile_cache import isolate_inductor_cache
from stride.kernels.runtime import (
    MAX_ROW_WIDTH,
    SUPPORTED_DTYPES,
    notice_once,
    triton_available,
    triton_runs_on,
)

KERNEL_CHOICES: tuple[str, ...] = typing.get_args(Kernels)  # `train.kernels`, declared in the config schema


@dataclass(frozen=True)
class KernelOps:
    """One implementation of every fused op; `name` is the implementation that actually runs."""

    name: str
    rms_norm: Callable[..., torch.Tensor]
    layer_norm: Callable[..., torch.Tensor]
    swiglu: Callable[..., torch.Tensor]
    rope: Callable[..., torch.Tensor]
    ts_loss: Callable[..., torch.Tensor]
    linear_cross_entropy: Callable[..., torch.Tensor]


def _flat_linear_ce(chunk_ce: linear_ce.ChunkCE) -> Callable[..., torch.Tensor]:
    """Accept x [..., D] and target [...] by flattening the leading dimensions."""

    def fn(x, weight, bias, target, *, ignore_index=-100, chunk_rows=None):
        if x.dim() < 1 or target.shape != x.shape[:-1]:
            raise ValueError(
                f"linear_cross_entropy: target shape {tuple(target.shape)} must be x shape "
                f"{tuple(x.shape)} without its last dimension"
            )
        # rows given, not -1: with D = 0 reshape(-1, 0) was ambiguous (a RuntimeError naming no op)
        return linear_ce.linear_cross_entropy(
            x.reshape(target.numel(), x.shape[-1]), weight, bias, target.reshape(-1),
            ignore_index=ignore_index, chunk_rows=chunk_rows, chunk_ce=chunk_ce,
        )

    fn.__name__ = "linear_cross_entropy"
    return fn


# The inputs whose dtype and shape a Triton op's kernel is written for, by position and by keyword
DATA_ARGS: dict[str, tuple[str, ...]] = {
    "rms_norm": ("x",), "layer_norm": ("x",), "swiglu": ("gate", "up"), "rope": ("x",), "ts_loss": ("pred", "target"),
}


def _kernel_refuses(name: str, args: tuple, kwargs: dict) -> str | None:
    """Why the Triton kernel cannot take these inputs although the torch reference can, or None.

    float64 data (the kernels load and store fp32 / bf16 / fp16) and norm rows wider than one program holds
    (MAX_ROW_WIDTH): the Triton ops raised TypeError / ValueError where the torch ops computed (audit 19), so the
    same call worked or failed by `train.kernels`. Integer inputs are not listed: every op set refuses them."""
    data = [args[i] if i < len(args) else kwargs.get(n) for i, n in enumerate(DATA_ARGS.get(name, ()))]
    for t in data:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype not in SUPPORTED_DTYPES:
            return f"dtype {t.dtype}"
    x = data[0] if data else None
    if name in ("rms_norm", "layer_norm") and isinstance(x, torch.Tensor) and x.dim() and x.shape[-1] > MAX_ROW_WIDTH:
        return f"rows of {x.shape[-1]} values (the kernel holds at most {MAX_ROW_WIDTH})"
    return None


def _triton(module: str, name: str, fallback: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A Triton op that imports its module on first use and runs the torch fallback, with a one-time notice, for
    tensors Triton cannot take here (CPU tensors without the interpreter) or inputs its kernel is not written for
    (float64, norm rows over MAX_ROW_WIDTH)."""

    @functools.wraps(fallback)
    def op(*args, **kwargs):
        # keyword tensors too: with none positional, triton_runs_on() was all([]), True, and Triton got CPU tensors;
        # not `quantiles`, a setting the op reads as floats (a CPU tensor of them beside CUDA data is fine)
        named = [a for k, a in kwargs.items() if k != "quantiles"]
        tensors = [a for a in (*args, *named) if isinstance(a, torch.Tensor)]
        if not triton_runs_on(*tensors):
            notice_once(
                f"triton-{name}",
                f"stride.kernels: {name} got tensors on {tensors[0].device if tensors else '?'}, "
                "where Triton cannot run; using the PyTorch fallback",
            )
            return fallback(*args, **kwargs)
        refused = _kernel_refuses(name, args, kwargs)
        if refused is not None:
            notice_once(f"triton-{name}-{refused.split()[0]}",
                        f"stride.kernels: {name} got {refused}, which its Triton kernel does not take; "
                        "using the PyTorch fallback")
            return fallback(*args, **kwargs)
        return getattr(importlib.import_module(f"stride.kernels.{module}"), name)(*args, **kwargs)

    return op


def _triton_chunk_ce(logits, target, n_valid, ignore_index, write_grad):
    if not triton_runs_on(logits):
        notice_once("triton-linear_cross_entropy", f"stride.kernels: linear_cross_entropy got tensors on "
                    f"{logits.device}, where Triton cannot run; using the PyTorch fallback")
        return linear_ce.torch_chunk_cross_entropy(logits, target, n_valid, ignore_index, write_grad)
    from stride.kernels.triton_cross_entropy import chunk_cross_entropy

    return chunk_cross_entropy(logits, target, n_valid, ignore_index, write_grad)


# Fused op -> (the module under stride.kernels with its Triton kernel, its torch reference). Adding an op:
# its kernel file, its reference (reference.py), a line here and the field of the same name in KernelOps.
FUSED: dict[str, tuple[str, Callable[..., torch.Tensor]]] = {
    "rms_norm": ("triton_norms", reference.rms_norm),
    "layer_norm": ("triton_norms", reference.layer_norm),
    "swiglu": ("triton_swiglu", reference.swiglu),
    "rope": ("triton_rope", reference.rope),
    "ts_loss": ("triton_ts_loss", reference.ts_loss),
}


@functools.cache
def _torch_ops() -> KernelOps:
    return KernelOps(name="torch", **{op: ref for op, (_, ref) in FUSED.items()},
                     linear_cross_entropy=_flat_linear_ce(linear_ce.torch_chunk_cross_entropy))


@functools.cache
def _triton_ops() -> KernelOps:
    return KernelOps(name="triton", **{op: _triton(module, op, ref) for op, (module, ref) in FUSED.items()},
                     linear_cross_entropy=_flat_linear_ce(_triton_chunk_ce))


@functools.cache
def _compiled_ops() -> KernelOps:
    """torch.compile (inductor) of the references; the chunked linear+CE stays eager (its chunk loop
    is already the memory saving, and compiling it would unroll one graph per chunk count)."""
    isolate_inductor_cache()
    c = functools.partial(torch.compile, dynamic=None)
    return KernelOps(name="compile", **{op: c(ref) for op, (_, ref) in FUSED.items()},
                     linear_cross_entropy=_flat_linear_ce(linear_ce.torch_chunk_cross_entropy))


def get_ops(kernels: str = "torch") -> KernelOps:
    """The op set for `kernels`; "triton" without a GPU (and without TRITON_INTERPRET=1) is torch."""
    if kernels not in KERNEL_CHOICES:
        raise ValueError(f"kernels={kernels!r} is not one of {', '.join(KERNEL_CHOICES)}")
    if kernels == "torch":
        return _torch_ops()
    if kernels == "compile":
        return _compiled_ops()
    if not triton_available():
        notice_once(
            "triton-unavailable",
            "stride.kernels: kernels='triton' needs a CUDA GPU (or TRITON_INTERPRET=1); "
            "using the PyTorch reference ops instead",
        )
        return _torch_ops()
    return _triton_ops()

