"""Tensor parallel plan for stride's transformers (torch.distributed.tensor.parallel).

The model stays single-device code; this plan addresses its module names (stride.models.layers).
Per block, Megatron's layout, so activations inside a sub-layer never leave their rank:

- Attention by heads: `attn.wq`, `attn.wk`, `attn.wv` column-wise (a contiguous Shard(0) of each
  gives every rank n_heads/tp whole heads), `attn.wo` row-wise. Each rank runs RoPE and SDPA on
  its own heads; the model reads the head count from the local shape.
- MLP (SwiGLU): `w1`, `w3` column-wise, `w2` row-wise.
- Without sequence parallel: one all-reduce per sub-layer forward (after `wo`, after `w2`) and one
  in backward (the input gradient of the column-wise projections).
- Sequence parallel (`parallel.sequence_parallel`, default on): the residual stream and the
  RMSNorms are sharded along time (dim 1). Entering each sub-layer all-gathers the tokens
  (Shard(1) -> Replicate) and leaving it reduce-scatters (Partial -> Shard(1)): the same bytes as
  the all-reduce, split in two, and the norms run on T/tp tokens. The gathered input stays a
  DTensor (`use_local_output=False`), so in backward the column-wise input gradients (Partial)
  go straight to Shard(1) by one reduce-scatter instead of an all-reduce and a slice.
- Fused kernels set on the model (stride.train.kernels_apply) keep working: RoPE and SwiGLU get
  plain local tensors; a fused norm under SP is wrapped to run on the local tokens.

The embedding, the final norm and the head are replicated: a small part of the work here. With
sequence parallel the embedding's output is cut to each rank's tokens and the final norm sees the
whole sequence again (the forecasting head pools the last token; the token model's head scores
every position).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

ATTN_IN = ("wq", "wk", "wv")  # split by heads (column-wise); `wo` row-wise
# The module whose output enters the first block: TimeSeriesTransformer.embed, TokenLM.tok.
ENTRY_MODULES = ("embed", "tok")


def entry_module(model: nn.Module) -> str | None:
    """Name of the root's input module, or None when the model has none of ENTRY_MODULES."""
    return next((name for name in ENTRY_MODULES if isinstance(getattr(model, name, None), nn.Module)), None)


def block_plan(sequence_parallel: bool) -> dict:
    """Plan for one TransformerBlock, keyed by sub-module names."""
    # Each sub-layer's input enters as one DTensor that its column-wise projections share (three in
    # attention, two in the MLP): their input gradients add up as one Partial and are reduced once
    # (all-reduce, or reduce-scatter under SP) instead of once per projection.
    entering = Shard(1) if sequence_parallel else Replicate()  # SP: the all-gather of the tokens
    plan = {
        # attention takes (x, cos, sin); the RoPE tables stay plain tensors
        "attn": PrepareModuleInput(input_layouts=(entering, None, None),
                                   desired_input_layouts=(Replicate(), None, None), use_local_output=False),
        **{f"attn.{w}": ColwiseParallel() for w in ATTN_IN},
        "attn.wo": RowwiseParallel(output_layouts=entering),
        "mlp": PrepareModuleInput(input_layouts=(entering,), desired_input_layouts=(Replicate(),),
                                  use_local_output=False),
        "mlp.w1": ColwiseParallel(),
        "mlp.w3": ColwiseParallel(),
        "mlp.w2": RowwiseParallel(output_layouts=entering),
    }
    if sequence_parallel:
        plan.update({"attn_norm": SequenceParallel(), "mlp_norm": SequenceParallel()})
    return plan


def on_local_shards(kernel: Callable) -> Callable:
    """A fused norm `kernel(x, weight, eps)` (stride.train.kernels_apply) run on this rank's tokens.

    Under SP a norm gets a Shard(1) DTensor input and a Replicate DTensor weight, and a Triton
    kernel takes plain tensors only. The weight's gradient sums over tokens, so on each rank it is
    a partial sum over that rank's tokens: `Partial`, reduced where the gradient is used.
    """

    def run(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if not isinstance(x, DTensor):
            return kernel(x, weight, eps)
        w = weight.to_local(grad_placements=[Partial()]) if isinstance(weight, DTensor) else weight
        y = kernel(x.to_local(), w, eps)
        return DTensor.from_local(y, x.device_mesh, x.placements, run_check=False)

    return run


def apply_tp(model: nn.Module, tp_mesh: DeviceMesh, sequence_parallel: bool = True) -> int:
    """Parallelize `model` in place over `tp_mesh`; returns the number of blocks parallelized.

    stride.parallel.layout.check_model has checked the module names and sizes this relies on.
    """
    blocks = model.blocks
    for block in blocks:
        parallelize_module(block, tp_mesh, block_plan(sequence_parallel))
        for norm in (block.attn_norm, block.mlp_norm) if sequence_parallel else ():
            if getattr(norm, "kernel", None) is not None:
                norm.kernel = on_local_shards(norm.kernel)
    if sequence_parallel:
        root = {}
        # A pipeline stage may lack the entry (not the first stage) or the final norm (not the last):
        # its input / output is then the residual stream itself, which crosses the stage boundary as
        # this rank's [B, T/tp, d_model] shard (see boundary_shape).
        entry = entry_module(model)
        if entry is not None:
            # the replicated entry's output: each rank keeps its tokens (no communication)
            root[entry] = PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(1))
        if isinstance(getattr(model, "norm", None), nn.Module):
            # the final norm and the head see the whole sequence again
            root["norm"] = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
            )
        if root:
            parallelize_module(model, tp_mesh, root)
    return len(blocks)


def boundary_shape(shape: torch.Size, tp: int, sequence_parallel: bool) -> torch.Size:
    """Shape on one TP rank of the residual stream [B, T, d_model] between two blocks.

    Between blocks the plan leaves a plain local tensor (never a DTensor): with sequence parallel
    this rank's T/tp tokens (Shard(1)), without it the whole, replicated stream. Pipeline stages
    send and receive exactly this, TP rank i of one stage to TP rank i of the next.
    """
    if not sequence_parallel or tp == 1:
        return shape
    b, t, *rest = shape
    return torch.Size([b, t // tp, *rest])
