"""What a model declares so that `stride.parallel` and the trainer can apply techniques from outside.

A model (stride's own families, or a user's `module:factory` model) sets a class attribute
`parallel_plan = ParallelPlan(...)` beside its code: which attribute holds its repeated blocks
(pipeline stages, activation checkpointing and FSDP units are cut there), and, if it supports
tensor parallelism, its plan in torch's `ParallelStyle`s and the checks that say whether a degree
fits. `stride.parallel` applies what is declared; it knows no module names of any model.

A model without `parallel_plan` gets `ParallelPlan()`: blocks in `model.blocks` (if it has them),
no tensor parallelism.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from torch.distributed.tensor.parallel import ParallelStyle


@dataclass(frozen=True)
class TensorParallelPlan:
    """Where each module's weights and activations go over the tensor-parallel ranks.

    `block` is applied to every block (keys: sub-module names inside one block), `root` to the model's
    own other modules (keys: their names); a pipeline stage that lacks a root module skips its entry.
    Under sequence parallelism the residual stream between blocks is sharded along dim 1 (time), as
    torch's `SequenceParallel` shards it; norms planned as `SequenceParallel` run on their tokens.
    """

    block: dict[str, ParallelStyle]
    root: dict[str, ParallelStyle] = field(default_factory=dict)


@dataclass(frozen=True)
class ParallelPlan:
    blocks: str = "blocks"
    """Attribute holding the repeated blocks (an nn.ModuleList): pipeline stages, checkpointing, FSDP units."""
    tensor_parallel: Callable[[bool], TensorParallelPlan] | None = None
    """`sequence_parallel` -> the plan; None: the model has no tensor-parallel plan. May raise ConfigError
    (e.g. when the model cannot run sequence parallel)."""
    check_tp: Callable[[nn.Module, int], None] | None = None
    """Raise a ConfigError when degree `tp` does not fit this model instance (heads, hidden sizes)."""


def plan_of(model: nn.Module) -> ParallelPlan:
    """The plan `model` declares, or the default (blocks in `model.blocks`, no tensor parallelism)."""
    plan = getattr(model, "parallel_plan", None)
    if plan is None:
        return ParallelPlan()
    if not isinstance(plan, ParallelPlan):
        raise TypeError(f"{type(model).__name__}.parallel_plan is a {type(plan).__name__}, not a "
                        "stride.models.plan.ParallelPlan")
    return plan


def blocks_of(model: nn.Module) -> nn.ModuleList | None:
    """The model's repeated blocks as declared, or None when it has none (or they are not a ModuleList)."""
    blocks = getattr(model, plan_of(model).blocks, None)
    return blocks if isinstance(blocks, nn.ModuleList) else None
