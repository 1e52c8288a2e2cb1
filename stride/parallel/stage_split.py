"""Pipeline stages cut from the single-device model by module, keeping its parameter names.

A stage is the model itself with only some parts left: a contiguous range of its blocks (kept
under their indices in the full model, so `blocks.5.attn.wo.weight` is called that on whichever
stage holds it), the modules that run before the blocks (the embedding) on the first stage and
those that run after them (final norm, head) on the last. Because a stage is still an ordinary
module with the full model's FQNs, activation checkpointing, compile, FSDP2/DDP and DCP apply to it
unchanged, and a checkpoint written by two stages loads into one process.

Which parts run before and which after the blocks is found by running the model once with hooks,
not by a list of names, so any model that keeps its layers in one ModuleList (as its `parallel_plan` declares,
stride.models.plan; default `model.blocks`) and skips a part that
is `None` (see TimeSeriesTransformer.forward) can be split. Chosen over the tracer frontend
(`pipeline()` + `SplitPoint`), which hands back a traced graph module per stage: its
submodule names differ from the model's, and AC/compile/FSDP would apply to generated code.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from stride.config.errors import ConfigError
from stride.models.plan import blocks_of, plan_of


class StageBlocks(nn.ModuleList):
    """The blocks one stage keeps, registered under their index in the full model.

    Positional access (`blocks[0]`, `blocks[-1]`, assignment, iteration) addresses the kept blocks
    in order, as code written for the full ModuleList expects; names (and so state-dict keys)
    stay the full model's, e.g. `blocks.2` for the first block of a stage that starts at layer 2.
    """

    def __init__(self, blocks: dict[int, nn.Module]) -> None:
        super().__init__()
        for i, block in blocks.items():
            self.add_module(str(i), block)

    def _name(self, idx: int) -> str:
        return list(self._modules)[idx]

    def __getitem__(self, idx):  # type: ignore[override]
        if isinstance(idx, slice):
            return StageBlocks({int(k): m for k, m in list(self._modules.items())[idx]})  # type: ignore[misc]
        return self._modules[self._name(idx)]

    def __setitem__(self, idx: int, module: nn.Module) -> None:
        self.add_module(self._name(idx), module)

    def __delitem__(self, idx) -> None:  # type: ignore[override]
        raise TypeError("a stage's blocks keep their full-model indices: they cannot be deleted by position")

    def append(self, module: nn.Module) -> StageBlocks:  # type: ignore[override]
        raise TypeError("a stage's blocks keep their full-model indices: append to the full model instead")

    @property
    def indices(self) -> list[int]:
        return [int(k) for k in self._modules]

    def at(self, index: int) -> nn.Module:
        """The block with full-model index `index`."""
        return self._modules[str(index)]  # type: ignore[return-value]


@dataclass(frozen=True)
class OuterParts:
    """The model's direct children other than `blocks`: run before the blocks (first stage) or after (last)."""

    first: tuple[str, ...]
    last: tuple[str, ...]


def _blocks(model: nn.Module) -> nn.ModuleList:
    blocks = blocks_of(model)
    if blocks is None or len(blocks) == 0:
        raise ConfigError(
            f"`parallel.pp` > 1 needs the model's layers in `model.{plan_of(model).blocks}` (a non-empty "
            f"nn.ModuleList, see stride.models.plan); {type(model).__name__} has none"
        )
    return blocks


def find_outer_parts(model: nn.Module, example: torch.Tensor) -> OuterParts:
    """Run `model` on `example` once and sort its other children by when they run relative to the blocks."""
    blocks = _blocks(model)
    calls: list[str] = []
    handles = [blocks[0].register_forward_pre_hook(lambda *_: calls.append("<blocks>"))]
    handles.append(blocks[-1].register_forward_hook(lambda *_: calls.append("</blocks>")))
    for name, child in model.named_children():
        if child is not blocks:
            handles.append(child.register_forward_pre_hook(lambda *_, n=name: calls.append(n)))
    try:
        with torch.no_grad():
            model(example)
    finally:
        for h in handles:
            h.remove()
    if "<blocks>" not in calls or "</blocks>" not in calls:
        raise ConfigError(f"`parallel.pp`: {type(model).__name__}.forward does not run its `blocks`; cannot split it")
    start, end = calls.index("<blocks>"), len(calls) - 1 - calls[::-1].index("</blocks>")
    before, after = set(calls[:start]), set(calls[end + 1 :])
    inside = set(calls[start + 1 : end]) - {"<blocks>", "</blocks>"}
    shared = sorted((before & after) | inside)
    if shared:
        raise ConfigError(
            f"`parallel.pp`: {type(model).__name__}.{shared[0]} runs between or on both sides of the blocks "
            "(shared or tied weights?); a stage boundary cannot separate it from its uses"
        )
    # Children that never ran (no parameters used) stay on the first stage, where they harm nothing.
    never = [n for n, c in model.named_children() if c is not blocks and n not in before | after]
    first = tuple(n for n, _ in model.named_children() if n in before or n in never)
    last = tuple(n for n, _ in model.named_children() if n in after)
    return OuterParts(first, last)


def block_ranges(n_layers: int, n_stages: int) -> list[range]:
    """Stage s holds blocks [s * n // S, (s + 1) * n // S): as even as the layers allow."""
    if n_stages > n_layers:
        raise ConfigError(f"{n_stages} pipeline stages but the model has only {n_layers} layers")
    return [range(s * n_layers // n_stages, (s + 1) * n_layers // n_stages) for s in range(n_stages)]


def _light_copy(model: nn.Module) -> nn.Module:
    """A new module object sharing every child, parameter and buffer, with registries of its own.

    Hooks or wrappers later installed on the copy (FSDP2 turns its root into an FSDPModule) do not
    reach the original, while parameters stay shared: the optimizer and checkpoints see one tensor.
    """
    view = copy.copy(model)
    for key, val in list(vars(view).items()):
        if isinstance(val, dict | set | list):
            view.__dict__[key] = copy.copy(val)
    return view


def keep_stage_parts(
    model: nn.Module, parts: OuterParts, indices: Sequence[int], first: bool, last: bool, *, in_place: bool
) -> nn.Module:
    """`model` (or a light copy of it) with only blocks `indices`, and the outer parts of the first/last stage."""
    stage = model if in_place else _light_copy(model)
    blocks = _blocks(model)
    by_index = blocks.at if isinstance(blocks, StageBlocks) else blocks.__getitem__
    setattr(stage, plan_of(model).blocks, StageBlocks({i: by_index(i) for i in indices}))
    for name in parts.first if not first else ():
        setattr(stage, name, None)
    for name in parts.last if not last else ():
        setattr(stage, name, None)
    return stage
