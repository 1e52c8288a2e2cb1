"""The loss a run trains with: the caller's, the model's own, or `[model] loss` (fused when kernels are)."""

from __future__ import annotations

from torch import nn

from stride.config.schema import RunConfig
from stride.models.losses import LossFn, make_loss
from stride.train.kernels_apply import kernel_loss


def resolve_loss(model: nn.Module, cfg: RunConfig, given: LossFn | None = None) -> LossFn:
    """`given`, else `model.loss` (a model that defines its own, e.g. TokenLM), else the named loss of
    `[model]`: the fused op when `train.kernels` selects fused kernels, the torch loss otherwise."""
    if given is not None:
        return given
    own = getattr(model, "loss", None)
    if own is not None:
        return own
    m = cfg.model
    fused = kernel_loss(cfg.train.kernels, m)
    loss = fused or make_loss(m.loss, huber_delta=m.huber_delta, quantiles=m.quantiles)
    loss.stride_loss = m.loss  # type: ignore[attr-defined]  # the output it needs is known (train/output_check.py)
    loss.stride_fused = fused is not None  # type: ignore[attr-defined]  # what `train.kernels` acted on (the trainer)
    return loss


def loss_is_fused(loss: LossFn) -> bool:
    """Whether `resolve_loss` gave the fused kernel loss (a caller's or the model's own loss is never replaced)."""
    return bool(getattr(loss, "stride_fused", False))
