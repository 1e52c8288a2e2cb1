"""Adapting what a user passes as data into an endless stream of global batches, epoch by epoch."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from stride.data.loader import Batch
from stride.data.tensor_batches import TensorBatches

__all__ = ["Batch", "TensorBatches", "as_batches", "endless"]


def as_batches(data: Any, batch_size: int, seed: int, shuffle: bool = True) -> Iterable[Batch]:
    """A (X, Y) tensor pair becomes TensorBatches; any other iterable of (x, y) is used as it is."""
    if isinstance(data, tuple | list) and len(data) == 2 and all(isinstance(t, torch.Tensor) for t in data):
        return TensorBatches(data[0], data[1], batch_size, seed, shuffle)
    if not hasattr(data, "__iter__"):
        raise TypeError(f"training data must be an iterable of (inputs, targets) or a tensor pair, got {type(data)}")
    return data


def endless(data: Iterable[Batch], start_epoch: int = 0) -> Iterator[tuple[int, Batch]]:
    """Yield (epoch, batch) forever, calling set_epoch at each epoch where the source has it."""
    epoch = start_epoch
    while True:
        if hasattr(data, "set_epoch"):
            data.set_epoch(epoch)
        empty = True
        for batch in data:
            empty = False
            yield epoch, batch
        if empty:
            raise ValueError("the training data yielded no batch in an epoch")
        epoch += 1
