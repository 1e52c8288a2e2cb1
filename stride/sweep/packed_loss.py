"""The training losses of `stride.models.losses`, one value per model of a pack, each with its own parameters.

MSE, Huber (each model its own delta) and pinball (each model its own quantile levels, the same count)
on predictions [N, B, H] (or [N, B, H, Q]) against targets shared by the pack [B, H] or per model
[N, B, H]. Like `make_loss`, low-precision predictions are cast to float32 before the reduction; float64
ones stay float64 (the reference runs in the tests).
"""

from __future__ import annotations

import torch

from stride.config.schema import ModelConfig

KINDS = ("mse", "huber", "quantile")


def _wide(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


class PackedLoss:
    def __init__(self, models: list[ModelConfig], device: torch.device) -> None:
        kinds = {m.loss for m in models}
        if len(kinds) != 1:
            raise ValueError(f"a pack trains one loss kind; got {sorted(kinds)}")
        self.kind = kinds.pop()
        if self.kind not in KINDS:
            raise ValueError(f"unknown loss {self.kind!r}: expected {', '.join(KINDS)}")
        n = len(models)
        # kept in float64 and cast to the predictions' dtype, as the solo loss casts a Python float
        wide = torch.float64
        self.delta = torch.tensor([m.huber_delta for m in models], dtype=wide, device=device).view(n, 1, 1)
        self.quantiles = (torch.tensor([m.quantiles for m in models], dtype=wide, device=device).view(n, 1, 1, -1)
                          if self.kind == "quantile" else None)

    def __call__(self, pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-model mean loss [N] of pred [N, B, ...] against y [B, ...] or [N, B, ...]."""
        pred = _wide(pred)
        y = _wide(y).to(pred.dtype)
        dims = tuple(range(1, pred.dim()))
        if self.kind == "quantile":
            assert self.quantiles is not None
            err = y.unsqueeze(-1) - pred
            q = self.quantiles.to(pred.dtype)
            return torch.maximum(q * err, (q - 1) * err).mean(dims)
        err = pred - y
        if self.kind == "mse":
            return (err * err).mean(dims)
        d = self.delta.to(pred.dtype)
        a = err.abs()
        return torch.where(a < d, 0.5 * err * err, d * (a - 0.5 * d)).mean(dims)
