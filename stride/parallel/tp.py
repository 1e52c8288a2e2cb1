"""Tensor parallel plan for stride's time-series transformer (torch.distributed.tensor.parallel).

The model stays single-device code; this plan addresses its module names. Per block:

- MLP (SwiGLU): `w1`, `w3` column-wise, `w2` row-wise: the hidden activations never leave their
  rank, one reduction per MLP (Megatron layout).
- Sequence parallel (`parallel.sequence_parallel`, default on): the residual stream and the RMSNorms
  between sub-layers are sharded along time (dim 1), so each rank normalises T/tp tokens and the
  MLP's reduction becomes a reduce-scatter; entering the MLP all-gathers the tokens.
- Attention is replicated across the TP group (each rank computes all heads on the full sequence and
  keeps its tokens). The model fuses q, k and v into one `wqkv` Linear whose rows are [q; k; v]:
  a contiguous row split does not give each rank whole heads, so head-parallel attention needs the
  model to keep q, k, v apart (or a strided placement); that is left as a model change.

The embedding, the final norm and the head are replicated too: they are a small part of the work.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    PrepareModuleInputOutput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)


def block_plan(sequence_parallel: bool) -> dict:
    """Plan for one TransformerBlock, keyed by sub-module names."""
    if not sequence_parallel:
        return {"mlp.w1": ColwiseParallel(), "mlp.w3": ColwiseParallel(), "mlp.w2": RowwiseParallel()}
    return {
        "attn_norm": SequenceParallel(),
        # attention runs on the full sequence (replicated), then each rank keeps its tokens
        "attn": PrepareModuleInputOutput(
            input_layouts=(Shard(1), None, None),
            desired_input_layouts=(Replicate(), None, None),
            use_local_input=True,
            output_layouts=Replicate(),
            desired_output_layouts=Shard(1),
            use_local_output=True,
        ),
        "mlp_norm": SequenceParallel(),
        "mlp": PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
        ),
        "mlp.w1": ColwiseParallel(),
        "mlp.w3": ColwiseParallel(),
        "mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
    }


def apply_tp(model: nn.Module, tp_mesh: DeviceMesh, sequence_parallel: bool = True) -> int:
    """Parallelize `model` in place over `tp_mesh`; returns the number of blocks parallelized."""
    blocks = model.blocks
    for block in blocks:
        parallelize_module(block, tp_mesh, block_plan(sequence_parallel))
    if sequence_parallel:
        root = {
            # the replicated embedding's output: each rank keeps its tokens (no communication)
            "embed": PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(1)),
            # the final norm and head see the whole sequence again (the head pools the last token)
            "norm": PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
            ),
        }
        parallelize_module(model, tp_mesh, root)
    return len(blocks)
