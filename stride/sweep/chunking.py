"""How many models of a pack train at once (a chunk), and what one model occupies while it trains.

A pack's step runs chunk by chunk (stride.sweep.packed_train). On a GPU the whole pack is one chunk: what
packing saves there is kernel launches. On a CPU a chunk is as many models as fit their state and
activations in the last-level cache: the pack's activations grow with N, and once they no longer fit in
the cache every elementwise pass streams them through memory, where one model's stayed in cache.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from stride.config import RunConfig
from stride.metrics.memory import SavedActivations

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def footprint(model: torch.nn.Module, loss_fn: LossFn, x: torch.Tensor, y: torch.Tensor,
              n_state: int) -> tuple[int, int]:
    """(parameters + gradients + optimizer state, activations autograd keeps) of one model on batch (x, y), bytes."""
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    with SavedActivations() as saved:
        loss = loss_fn(model(x), y)
    del loss
    return params * (2 + n_state), saved.bytes


def optimizer_states(cfg: RunConfig) -> int:
    """Tensors of optimizer state per parameter: AdamW two moments, SGD one buffer with momentum."""
    return 2 if cfg.optim.name.startswith("adam") else (1 if cfg.optim.momentum else 0)


def cache_bytes() -> int | None:
    """The largest CPU cache of this machine (the last level, shared by the cores), from sysfs; None if unknown."""
    best = None
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        value = int(size[:-1] if size[-1:] in "KMG" else size) * unit
        best = max(best or 0, value)
    return best


def default_chunk(n: int, device: torch.device, per_model_bytes: int) -> int:
    """Models trained at once inside a pack of n: on a GPU all of them (launches are what packing saves); on a
    CPU as many as fit their state and activations in the last-level cache, at least one.

    Measured on this project's 2-core AMD EPYC host (32 MiB L3): 16 transformers (48 MiB a model) at once ran
    1.2x slower per model than 1-4 at a time, 64 at once 2.5x slower; MLPs (4.5 MiB a model) gain from
    batching up to the cache's worth.
    """
    if device.type != "cpu":
        return n
    cache = cache_bytes()
    if not cache:
        return n
    return max(1, min(n, cache // max(per_model_bytes, 1)))
