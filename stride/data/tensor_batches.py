"""In-memory (X, Y) tensors as shuffled batches, seeded by (seed, epoch) like the window loader."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from stride.data.loader import Batch


class TensorBatches:
    """(X, Y) tensors as shuffled batches, seeded by (seed, epoch) like the window loader."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int = 0, shuffle: bool = True,
                 drop_last: bool = True):
        """drop_last: training drops the rows that do not fill a batch (the order changes every epoch, so no row is
        left out for good); evaluation keeps them, in a shorter last batch: with rows in time order they are the
        most recent ones, which validation skipped until 2026-12-05 (audit 9, #9)."""
        if len(x) != len(y):
            raise ValueError(f"inputs have {len(x)} rows but targets have {len(y)}")
        if len(x) < batch_size and drop_last:
            raise ValueError(f"{len(x)} rows are fewer than batch size {batch_size}")
        if not len(x):
            raise ValueError("no rows")
        self.x, self.y, self.batch_size, self.seed, self.shuffle = x, y, batch_size, seed, shuffle
        self.drop_last = drop_last
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.x) // self.batch_size if self.drop_last else -(-len(self.x) // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[Batch]:
        if self.shuffle:
            g = torch.Generator().manual_seed((self.seed * 1_000_003 + self.epoch) % 2**64)  # torch: < 2**64
            order = torch.randperm(len(self.x), generator=g)
        else:
            order = torch.arange(len(self.x))
        for i in range(len(self)):
            idx = order[i * self.batch_size : (i + 1) * self.batch_size]
            yield self.x[idx], self.y[idx]
