"""The validation loss: the first `train.val_batches` batches of the validation data, forward only."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def validation_loss(tr: Any, model: nn.Module) -> float:
    """Mean loss of `model` over the trainer `tr`'s first `train.val_batches` validation batches (sample-weighted)."""
    assert tr.val_data is not None
    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for i, batch in enumerate(tr.val_data):
            if i >= tr.cfg.train.val_batches:
                break
            x, y = tr._to_device(batch)
            with tr.precision.autocast():
                loss = _batch_loss(tr, model, x, y)
            total += float(loss) * len(x)
            n += len(x)
    model.train()
    return total / max(n, 1)


def _batch_loss(tr: Any, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    pipe = tr.par.pipeline
    if pipe is None:
        return tr.loss_fn(model(x), y)
    out = pipe.forward_only(x)  # the stages in order, forward only (stride.parallel.pipeline)
    return pipe.share(tr.loss_fn(out, y) if out is not None else torch.zeros((), device=tr.device))
