"""DTensor (FSDP2 / tensor-parallel) parameters: detect them and refuse them with a clear message."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import torch

from stride.config.schema import SHARDED_PARAM_OPTIMIZERS


def is_dtensor(t: Any) -> bool:
    """isinstance(t, DTensor), without importing DTensor where none can exist yet: `torch.distributed.tensor` takes
    0.4 s to import (sympy, DTensor's op table; 2-core AMD EPYC), and an object can only be a DTensor once that module
    was imported (importing a submodule imports its package first). stride.parallel.lazy_types uses this one."""
    mod = sys.modules.get("torch.distributed.tensor")
    return mod is not None and isinstance(t, mod.DTensor)


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
