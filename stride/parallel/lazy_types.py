"""Is this a DTensor, an FSDP2 module? Asked without importing them.

`torch.distributed.tensor` (which `torch.distributed.fsdp` imports) takes 0.4 s to import on a 2-core AMD EPYC
(sympy through torch.fx's symbolic shapes, DTensor's op table), and every process that imports the trainer paid it,
though a one-process run holds no DTensor and no FSDP module. An object can only be one of them once their module has
been imported (importing a submodule imports its package first), so each check asks `sys.modules` first: not
imported, not one; imported, the real isinstance.
"""

from __future__ import annotations

import sys
from typing import Any

from stride.optim.dtensor import is_dtensor  # the same check, below this layer (optim imports no parallel)

__all__ = ["is_dtensor", "is_fsdp_module"]


def is_fsdp_module(x: Any) -> bool:
    """isinstance(x, FSDPModule) (a module `fully_shard` wrapped), without importing FSDP where none can exist yet."""
    mod = sys.modules.get("torch.distributed.fsdp")
    return mod is not None and isinstance(x, mod.FSDPModule)
