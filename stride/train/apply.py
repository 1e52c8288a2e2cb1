"""Techniques applied to a single-device model from outside, in a fixed order.

Order (as torchtitan's parallelize step): tensor parallel -> activation checkpointing -> compile ->
FSDP / DDP. AC wraps blocks before compile so the compiler sees the checkpoint regions; compile
comes before data parallelism so each FSDP unit's compute is compiled and its communication stays
outside the graph. Tensor, pipeline and data parallelism live in `stride.parallel`.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    CheckpointWrapper,
    checkpoint_wrapper,
)

from stride.config.errors import ConfigError
from stride.kernels.compile_cache import isolate_inductor_cache
from stride.models.plan import blocks_of, plan_of

# torch's wrapper (as torchtitan uses): non-reentrant checkpointing (kwargs, compile), and state-dict
# hooks that drop its `_checkpoint_wrapped_module.` prefix, so a run with AC saves, loads and hashes
# the same keys as one without (checkpoints and params_sha256 stay comparable).
CheckpointedBlock = CheckpointWrapper


def apply_activation_checkpointing(model: nn.Module, mode: str, every: int = 1) -> int:
    """Wrap every block ('full') or every `every`-th block ('every_k'); returns how many were wrapped.

    Trade: about one extra forward of each wrapped block per step for not keeping its intermediates.
    """
    if mode == "none":
        return 0
    blocks = blocks_of(model)
    if blocks is None:
        raise ConfigError(
            f"`train.activation_checkpointing` = {mode!r} needs the model's blocks in one nn.ModuleList "
            f"(`model.{plan_of(model).blocks}`, see stride.models.plan); {type(model).__name__} has none"
        )
    k = 1 if mode == "full" else every
    wrapped = 0
    for i, block in enumerate(blocks):
        if i % k == 0 and not isinstance(block, CheckpointedBlock):
            blocks[i] = checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
            wrapped += 1
    return wrapped


def apply_compile(model: nn.Module, mode: str) -> nn.Module:
    """torch.compile the model (inductor). The optimizer step is compiled in stride.optim.factory."""
    if mode == "off":
        return model
    isolate_inductor_cache()
    return torch.compile(model)
