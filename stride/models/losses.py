"""Multi-horizon regression losses: MSE, Huber, and pinball (quantile) averaged over horizons."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def pinball_loss(pred: torch.Tensor, target: torch.Tensor, quantiles: torch.Tensor) -> torch.Tensor:
    """pred [B, H, Q], target [B, H]: mean over batch, horizons and quantiles of max(q e, (q - 1) e)."""
    err = target.unsqueeze(-1) - pred
    q = quantiles.to(device=pred.device, dtype=pred.dtype)
    return torch.maximum(q * err, (q - 1) * err).mean()


def make_loss(kind: str, *, huber_delta: float = 1.0, quantiles: list[float] | None = None) -> LossFn:
    """The loss by name; predictions are cast to fp32 so the reduction is exact under autocast."""
    if kind == "mse":
        return lambda pred, y: F.mse_loss(pred.float(), y.float())
    if kind == "huber":
        return lambda pred, y: F.huber_loss(pred.float(), y.float(), delta=huber_delta)
    if kind == "quantile":
        q = torch.tensor(quantiles or [0.1, 0.5, 0.9], dtype=torch.float32)
        return lambda pred, y: pinball_loss(pred.float(), y.float(), q)
    raise ValueError(f"unknown loss {kind!r}: expected mse, huber or quantile")
