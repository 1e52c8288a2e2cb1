"""FLOPs of one training micro-step, counted once with `torch.utils.flop_counter`.

Counted on the model before activation checkpointing and compilation, so recomputation is not
counted: MFU uses model FLOPs (the PaLM convention), not hardware FLOPs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def count_train_flops(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
) -> int:
    """Forward + backward FLOPs for one batch (x, y). Grads and RNG are left as they were."""
    grads = [p.grad for p in model.parameters()]
    with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
        counter = FlopCounterMode(display=False)
        with counter:
            loss_fn(model(x), y).backward()
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = g
    return int(counter.get_total_flops())
