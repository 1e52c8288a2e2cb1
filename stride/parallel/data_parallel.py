"""Data parallelism from outside the model: DDP and FSDP2 (`fully_shard`), and gradient sync control.

DDP keeps a full replica per rank and all-reduces gradient buckets while backward still runs;
FSDP2 shards parameters, gradients and optimizer state and gathers each block's parameters just in
time. Both skip gradient communication on accumulation micro-steps (`no_sync` /
`set_requires_gradient_sync`), so accumulating k micro-batches costs one reduction, not k.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

from stride.config.schema import ParallelConfig
from stride.parallel.comm_hooks import CommTimer, register_comm_hook

DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def apply_ddp(
    module: nn.Module, mesh: DeviceMesh, p: ParallelConfig, device: torch.device
) -> tuple[DDP, CommTimer | None]:
    """Wrap in DDP over `mesh`'s group with the configured buckets and communication hook."""
    bucket_mb = p.ddp_bucket_mb
    if p.comm_hook == "powersgd" and dist.get_backend(mesh.get_group()) == "gloo":
        bucket_mb = max(bucket_mb, 1000.0)  # PowerSGD deadlocks on gloo with several buckets (FACTS.md)
    ddp = DDP(
        module,
        device_ids=[device.index] if device.type == "cuda" else None,
        process_group=mesh.get_group(),
        bucket_cap_mb=bucket_mb,
        gradient_as_bucket_view=p.gradient_as_bucket_view,
        static_graph=p.static_graph,
    )
    timer = register_comm_hook(ddp, p, mesh.get_group())
    return ddp, timer


def apply_fsdp(model: nn.Module, mesh: DeviceMesh, p: ParallelConfig) -> nn.Module:
    """fully_shard each block, then the root (embedding, final norm, head) as the last unit.

    Per-block units let block i+1's all-gather overlap block i's compute; the root's
    reshard_after_forward is False because its parameters are needed first in backward anyway.
    """
    dtype = DTYPES[p.mp_param_dtype]
    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, nn.ModuleList):
        for block in blocks:
            fully_shard(block, mesh=mesh, reshard_after_forward=p.reshard_after_forward, mp_policy=mp)
    fully_shard(model, mesh=mesh, reshard_after_forward=False, mp_policy=mp)
    return model


@contextlib.contextmanager
def grad_sync(model: nn.Module | None, sync: bool) -> Iterator[None]:
    """Communicate gradients in this backward only when `sync` (the last accumulation micro-step)."""
    if model is None or sync:
        if isinstance(model, FSDPModule):
            model.set_requires_gradient_sync(True)
        yield
    elif isinstance(model, DDP):
        with model.no_sync():
            yield
    elif isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(False)
        yield
    else:
        yield
