"""How one optimizer step's batch splits into `train.grad_accum` micro-batches, and how each one's loss counts.

One rule for the Trainer and the sweep's packed trainer: a packed model must train as its solo run does, and the two
had each written the split (and the pack kept dropping a remainder after the Trainer stopped)."""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=64)
def micro_batches(rows: int, accum: int) -> tuple[tuple[int, int], ...]:
    """The row ranges [lo, hi) of a batch of `rows` trained as `accum` micro-batches, the empty ones left out.

    Micro-batch i is rows [i * rows // accum, (i + 1) * rows // accum): equal parts where accum divides rows, else
    sizes differing by at most one (an iterable's short last batch), so every row trains once. The remainder used to
    be dropped, and a batch of fewer rows than accum trained empty micro-batches: a NaN loss, a diverged run. The
    last range is never empty. Cached: a run asks for the same few splits every step."""
    bounds = [(i * rows // accum, (i + 1) * rows // accum) for i in range(accum)]
    return tuple((lo, hi) for lo, hi in bounds if lo < hi)


def micro_loss(loss: torch.Tensor, lo: int, hi: int, rows: int, accum: int) -> torch.Tensor:
    """Micro-batch [lo, hi)'s mean loss as its part of the whole batch's mean: weighted by its share of the rows, so
    the step's loss and gradient are those of grad_accum = 1; equal parts divide by accum (the bits they always had).
    A loss that averages over valid tokens only (ignore_index) is weighted by rows all the same."""
    if accum == 1:
        return loss
    return loss / accum if rows % accum == 0 else loss * ((hi - lo) / rows)
