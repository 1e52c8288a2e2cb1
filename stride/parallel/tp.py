"""Tensor parallelism (torch.distributed.tensor.parallel) as the model declares it.

The model's `parallel_plan.tensor_parallel(sequence_parallel)` (stride.models.plan; the transformers'
is stride/models/transformer/parallelize.py) names which of its modules split how; this module only
applies it: the block plan to every block, the root plan to the model's own modules a pipeline stage
has, and, for norms planned as sequence parallel, a fused kernel (stride.train.kernels_apply) wrapped
to run on the rank's local tokens. Between blocks the residual stream is a plain local tensor: the
rank's T/tp tokens under sequence parallel (dim 1, as `SequenceParallel` shards), else the whole.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from stride.config.errors import ConfigError
from stride.models.plan import TensorParallelPlan, blocks_of, plan_of


def tp_plan(model: nn.Module, sequence_parallel: bool) -> TensorParallelPlan:
    """The model's declared plan, or a ConfigError when it declares none."""
    declared = plan_of(model).tensor_parallel
    if declared is None:
        raise ConfigError(f"`parallel.tp` > 1: {type(model).__name__} declares no tensor-parallel plan "
                          "(a `parallel_plan` with `tensor_parallel`, see stride.models.plan)")
    return declared(sequence_parallel)


def on_local_shards(kernel: Callable) -> Callable:
    """A fused norm `kernel(x, weight, eps)` (stride.train.kernels_apply) run on this rank's tokens.

    Under SP a norm gets a Shard(1) DTensor input and a Replicate DTensor weight, and a Triton
    kernel takes plain tensors only. The weight's gradient sums over tokens, so on each rank it is
    a partial sum over that rank's tokens: `Partial`, reduced where the gradient is used.
    """
    from torch.distributed.tensor import DTensor, Partial  # here, not at the top: see apply_tp

    def run(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if not isinstance(x, DTensor):
            return kernel(x, weight, eps)
        w = weight.to_local(grad_placements=[Partial()]) if isinstance(weight, DTensor) else weight
        y = kernel(x.to_local(), w, eps)
        return DTensor.from_local(y, x.device_mesh, x.placements, run_check=False)

    return run


def apply_tp(model: nn.Module, tp_mesh: DeviceMesh, sequence_parallel: bool = True) -> int:
    """Parallelize `model` in place over `tp_mesh` as it declares; returns the number of blocks parallelized.

    stride.parallel.layout.check_model has run the model's own checks (`parallel_plan.check_tp`) first.
    """
    # DTensor's imports (1.4 s on a 2-core host) are paid by a rank that applies TP, not by every process that
    # imports the layout checks (a `--nproc` launcher's preflight at tp = 1)
    from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module

    plan = tp_plan(model, sequence_parallel)
    blocks = blocks_of(model)
    assert blocks is not None, "check_model requires blocks for tp > 1"
    for block in blocks:
        parallelize_module(block, tp_mesh, plan.block)
        for name, style in plan.block.items():
            norm = block.get_submodule(name)
            if isinstance(style, SequenceParallel) and getattr(norm, "kernel", None) is not None:
                norm.kernel = on_local_shards(norm.kernel)
    # A pipeline stage may lack the entry (not the first stage) or the final norm (not the last): its input
    # / output is then the residual stream itself, which crosses the stage boundary as this rank's local
    # part (see boundary_shape).
    root = {name: style for name, style in plan.root.items() if isinstance(getattr(model, name, None), nn.Module)}
    if root:
        parallelize_module(model, tp_mesh, root)
    return len(blocks)


def boundary_shape(shape: torch.Size, tp: int, sequence_parallel: bool) -> torch.Size:
    """Shape on one TP rank of the residual stream [B, T, ...] between two blocks.

    Between blocks the plan leaves a plain local tensor (never a DTensor): with sequence parallel
    this rank's T/tp tokens (Shard(1)), without it the whole, replicated stream. Pipeline stages
    send and receive exactly this, TP rank i of one stage to TP rank i of the next.
    """
    if not sequence_parallel or tp == 1:
        return shape
    b, t, *rest = shape
    return torch.Size([b, t // tp, *rest])
