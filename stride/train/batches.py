"""Adapting what a user passes as data into an endless stream of global batches, epoch by epoch."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

Batch = tuple[torch.Tensor, torch.Tensor]


class TensorBatches:
    """(X, Y) tensors as shuffled batches, seeded by (seed, epoch) like the window loader."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int = 0, shuffle: bool = True):
        if len(x) != len(y):
            raise ValueError(f"inputs have {len(x)} rows but targets have {len(y)}")
        if len(x) < batch_size:
            raise ValueError(f"{len(x)} rows are fewer than batch size {batch_size}")
        self.x, self.y, self.batch_size, self.seed, self.shuffle = x, y, batch_size, seed, shuffle
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.x) // self.batch_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[Batch]:
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            order = torch.randperm(len(self.x), generator=g)
        else:
            order = torch.arange(len(self.x))
        for i in range(len(self)):
            idx = order[i * self.batch_size : (i + 1) * self.batch_size]
            yield self.x[idx], self.y[idx]


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
