"""Checkpoints with torch.distributed.checkpoint: exact resume, atomic commits, fault handling."""

from stride.checkpoint.callback import CheckpointCallback
from stride.checkpoint.errors import CheckpointError, ConfigMismatchError
from stride.checkpoint.guard import StepGuard
from stride.checkpoint.manifest import verify
from stride.checkpoint.rerun import RunExistsError, RunFinished
from stride.checkpoint.signals import Preempted
from stride.checkpoint.store import CheckpointStore

__all__ = ["CheckpointCallback", "CheckpointError", "CheckpointStore", "ConfigMismatchError", "Preempted",
           "RunExistsError", "RunFinished", "StepGuard", "verify"]
