"""A caller's training data whose batches differ in size: an iterable of (x, y) batches of the sizes given, in turn,
the same every epoch (its own batch size, an epoch ending in a short batch that grad_accum does not divide).

Not a list: a list of two batches is read as a tensor pair. One helper for the trainer's and the packed sweep's
accumulation and sample-count tests (tests/train/test_audit_switches_accum.py, tests/train/test_step_samples.py,
tests/sweep/test_packed_uneven_accum.py), which had a copy each."""

from __future__ import annotations

from collections.abc import Iterator

import torch

Batch = tuple[torch.Tensor, torch.Tensor]


class SizedBatches:
    """The batches in `items`, in order, every epoch."""

    def __init__(self, items: list[Batch]) -> None:
        self.items = items

    @classmethod
    def random(cls, sizes: list[int], seq: int, features: int, horizons: int, seed: int) -> SizedBatches:
        """Standard-normal windows [n, seq, features] and targets [n, horizons] from one generator seeded `seed`,
        drawn batch by batch (x, then y)."""
        g = torch.Generator().manual_seed(seed)
        return cls([(torch.randn(n, seq, features, generator=g), torch.randn(n, horizons, generator=g))
                    for n in sizes])

    @classmethod
    def slices(cls, x: torch.Tensor, y: torch.Tensor, sizes: list[int]) -> SizedBatches:
        """Consecutive row slices of (x, y) of the given sizes (their sum at most len(x))."""
        if sum(sizes) > len(x):
            raise ValueError(f"batch sizes {sizes} sum to {sum(sizes)}, more than the {len(x)} rows given")
        items, at = [], 0
        for n in sizes:
            items.append((x[at : at + n], y[at : at + n]))
            at += n
        return cls(items)

    def __iter__(self) -> Iterator[Batch]:
        return iter(self.items)
