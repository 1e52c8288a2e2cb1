"""DTensor (FSDP2 / tensor-parallel) parameters: detect them and refuse them with a clear message."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from stride.config.schema import SHARDED_PARAM_OPTIMIZERS


def is_dtensor(t: torch.Tensor) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed
        return False
    return isinstance(t, DTensor)


def reject_dtensor(params: Iterable[torch.Tensor], optimizer: str, why: str) -> None:
    """Raise before any state exists, so a sharded run fails at construction, not mid-training.

    `stride train` refuses such a config before this (stride.config.validate); this is for direct use."""
    for i, p in enumerate(params):
        if is_dtensor(p):
            names = ", ".join(repr(n) for n in SHARDED_PARAM_OPTIMIZERS)
            raise TypeError(
                f"{optimizer}: parameter {i} (shape {tuple(p.shape)}) is a DTensor (FSDP2/TP), which is not "
                f"supported: {why}. For sharded parameters use optim.name = one of {names} (in Python: "
                "torch.optim.AdamW, torch.optim.SGD or stride.optim.adamw_fused_triton.FusedAdamW)."
            )
