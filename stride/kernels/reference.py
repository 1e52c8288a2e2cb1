"""PyTorch reference implementations: the fallback op set and the semantics the Triton kernels match.

Every op computes in float32 whatever the input dtype (bf16/fp16 are upcast, as the kernels do)
and returns the input dtype, so switching `kernels` changes speed, not numerics beyond rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from stride.kernels.runtime import device_constant

LOSS_KINDS = ("mse", "huber", "quantile")


def check_floating(op: str, *tensors: torch.Tensor) -> None:
    """Integer inputs are an error on every path: the torch ops returned integer garbage (swiglu of int64 gave
    zeros) where the Triton ops raise, so the two paths disagreed."""
    for t in tensors:
        if not t.is_floating_point():
            raise TypeError(f"{op}: dtype {t.dtype} is not supported; use a floating-point tensor")


def check_norm_input(op: str, x: torch.Tensor) -> None:
    """A norm needs a last dimension to normalise (a 0-dim x gave IndexError in the Triton op) and floats."""
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension (the normalised one), got a 0-dim tensor")
    check_floating(op, x)


def check_norm_params(op: str, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    """weight (and bias, if given) must be floating [D] for x [..., D], on every op set: the torch ops broadcast a
    [1] weight where the Triton ops refused it, gave a broadcasting RuntimeError for a [7] weight, took an integer
    weight, and an AttributeError for weight None (audit 19)."""
    d = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None and name == "bias":
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a tensor of shape [{d}], got {type(t).__name__}")
        if t.shape != (d,):
            raise ValueError(f"{op}: {name} must have shape [{d}] for x of shape {tuple(x.shape)}, "
                             f"got {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{op}: {name} dtype {t.dtype} is not supported; use a floating-point tensor")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dimension."""
    check_norm_input("rms_norm", x)
    check_norm_params("rms_norm", x, weight)
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)


def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """LayerNorm over the last dimension, computed in float32."""
    check_norm_input("layer_norm", x)
    check_norm_params("layer_norm", x, weight, bias)
    b = None if bias is None else bias.float()
    return F.layer_norm(x.float(), (x.shape[-1],), weight.float(), b, eps).to(x.dtype)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, the gated-MLP activation."""
    check_floating("swiglu", gate, up)
    if gate.shape != up.shape:
        raise ValueError(f"swiglu: gate {tuple(gate.shape)} and up {tuple(up.shape)} must have one shape")
    return (F.silu(gate.float()) * up.float()).to(gate.dtype)


def check_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [>= T, D/2] sliced to the T of x [..., T, D]; clear errors for mismatched tables."""
    if x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"rope: x must be [..., T, D] with even D, got shape {tuple(x.shape)}")
    t, half = x.shape[-2], x.shape[-1] // 2
    if cos.shape != sin.shape or cos.dim() != 2 or cos.shape[0] < t or cos.shape[1] != half:
        raise ValueError(
            f"rope: cos/sin must be [>= {t}, {half}] for x of shape {tuple(x.shape)}, "
            f"got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    return cos[:t], sin[:t]


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs (x[..., 2i], x[..., 2i+1]) of x [..., T, D] by the angles cos/sin [T, D/2].

    cos/sin are constants (detached), as in the Triton op: switching `kernels` must not change which tensors
    get gradients (a learned table trained on the torch path, not on the Triton one)."""
    check_floating("rope", x)
    c, s = check_rope(x, cos, sin)
    c, s = c.detach().float(), s.detach().float()
    x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2).to(x.dtype)


def check_ts_loss(
    pred: torch.Tensor, target: torch.Tensor, kind: str, quantiles: Sequence[float] | None, delta: float = 1.0
) -> int:
    """Validate shapes, dtypes and delta for a multi-horizon loss; returns Q (1 unless kind is quantile)."""
    if kind not in LOSS_KINDS:
        raise ValueError(f"ts_loss: kind {kind!r} is not one of {', '.join(LOSS_KINDS)}")
    check_floating("ts_loss", pred, target)
    if target.dim() and target.shape[-1] == 0:  # the mean over no horizons: 0/0, and a [rows, 0] view failed
        raise ValueError(f"ts_loss: target {tuple(target.shape)} has no horizons (H = 0)")
    if kind == "huber" and not delta > 0:  # the Triton kernel took delta <= 0 and returned 0 or a negative loss
        raise ValueError(f"ts_loss: huber delta must be > 0, got {delta}")
    if kind == "quantile":
        if not quantiles:
            raise ValueError("ts_loss: kind 'quantile' needs a non-empty list of quantiles")
        if any(not 0.0 < q < 1.0 for q in quantiles):
            raise ValueError(f"ts_loss: quantiles must lie in (0, 1), got {list(quantiles)}")
        if pred.shape != (*target.shape, len(quantiles)):
            raise ValueError(
                f"ts_loss: quantile pred must be target shape + [{len(quantiles)}], "
                f"got pred {tuple(pred.shape)} and target {tuple(target.shape)}"
            )
        return len(quantiles)
    if pred.shape != target.shape:
        raise ValueError(f"ts_loss: pred {tuple(pred.shape)} and target {tuple(target.shape)} differ")
    return 1


def ts_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    kind: str = "mse",
    *,
    delta: float = 1.0,
    quantiles: Sequence[float] | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Multi-horizon regression loss; pred [..., H] (or [..., H, Q] for quantile), target [..., H].

    reduction "mean": one scalar, the mean over every element; "horizon": the mean per horizon [H].
    target is a constant (detached), as in the Triton op. quantiles may be a tensor (read as floats).
    """
    if quantiles is not None:
        quantiles = tuple(float(q) for q in quantiles)  # a tensor: `not quantiles` was ambiguous
    check_ts_loss(pred, target, kind, quantiles, delta)
    if reduction not in ("mean", "horizon"):
        raise ValueError(f"ts_loss: reduction {reduction!r} is not 'mean' or 'horizon'")
    p, y = pred.float(), target.detach().float()
    if kind == "mse":
        el = (p - y).pow(2)
    elif kind == "huber":
        el = F.huber_loss(p, y, delta=delta, reduction="none")
    else:
        # a constant made once: torch.tensor(..., device="cuda") waits for the stream every call (runtime.py);
        # under torch.compile it is folded into the graph, so compiled code makes it there
        q = (torch.tensor(list(quantiles), dtype=torch.float32, device=p.device) if torch.compiler.is_compiling()
             else device_constant(tuple(quantiles), torch.float32, p.device))
        err = y.unsqueeze(-1) - p
        el = torch.maximum(q * err, (q - 1) * err).mean(-1)
    if reduction == "mean":
        return el.mean()
    return el.reshape(-1, el.shape[-1]).mean(0)
