"""The validation loss: the first `train.val_batches` batches of the validation data, forward only."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def validation_loss(tr: Any, model: nn.Module) -> float:
    """Mean loss of `model` over the trainer `tr`'s first `train.val_batches` validation batches (sample-weighted).

    Under data parallelism each replica evaluates its slice of every batch (`Parallel.val_slice`) and the sums are
    added over ranks: every replica used to evaluate every batch, the same work dp times (outside audit 11). The
    tensor-parallel and pipeline ranks of a replica share its slice; they count it alike in both sums, so the ratio
    is the one-process mean up to the order of the additions."""
    assert tr.val_data is not None
    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for i, batch in enumerate(tr.val_data):
            if i >= tr.cfg.train.val_batches:
                break
            x, y = tr._to_device(batch)
            lo, hi, counts = tr.par.val_slice(len(x))
            x, y = x[lo:hi], y[lo:hi]
            with tr.precision.autocast():
                loss = _batch_loss(tr, model, x, y)
            if counts:
                total += float(loss) * len(x)
                n += len(x)
    model.train()
    total, n = tr.par.sum_over_ranks([total, float(n)])
    return total / max(n, 1)


def _batch_loss(tr: Any, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    pipe = tr.par.pipeline
    if pipe is None:
        return tr.loss_fn(model(x), y)
    out = pipe.forward_only(x)  # the stages in order, forward only (stride.parallel.pipeline)
    return pipe.share(tr.loss_fn(out, y) if out is not None else torch.zeros((), device=tr.device))
