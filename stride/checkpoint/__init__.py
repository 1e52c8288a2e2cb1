"""Checkpoints with torch.distributed.checkpoint: exact resume, atomic commits, fault handling.

The names below are loaded on first use (PEP 562): a process that needs only a light part of the package (the
launcher's signal handling in stride.launch.torchrun, `stride.checkpoint.signals`) does not import
torch.distributed.checkpoint and DTensor with it (1.9 s on a 2-core host) through this file.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ below loads each on first use, as stride/__init__
    from stride.checkpoint.callback import CheckpointCallback
    from stride.checkpoint.errors import CheckpointError, ConfigMismatchError
    from stride.checkpoint.guard import StepGuard
    from stride.checkpoint.manifest import verify
    from stride.checkpoint.rerun import RunExistsError, RunFinished
    from stride.checkpoint.signals import Preempted
    from stride.checkpoint.store import CheckpointStore

_WHERE = {"CheckpointCallback": "callback", "CheckpointError": "errors", "ConfigMismatchError": "errors",
          "StepGuard": "guard", "verify": "manifest", "RunExistsError": "rerun", "RunFinished": "rerun",
          "Preempted": "signals", "CheckpointStore": "store"}

__all__ = ["CheckpointCallback", "CheckpointError", "CheckpointStore", "ConfigMismatchError", "Preempted",
           "RunExistsError", "RunFinished", "StepGuard", "verify"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"stride.checkpoint.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'stride.checkpoint' has no attribute {name!r}")
