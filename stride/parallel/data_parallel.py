"""Data parallelism from outside the model: DDP and FSDP2 (`fully_shard`), and gradient sync control.

DDP keeps a full replica per rank and all-reduces gradient buckets while backward still runs;
FSDP2 shards parameters, gradients and optimizer state and gathers each block's parameters just in
time. Both skip gradient communication on accumulation micro-steps (`no_sync` /
`set_requires_gradient_sync`), so accumulating k micro-batches costs one reduction, not k.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.nn.parallel import DistributedDataParallel as DDP

from stride.config.dtypes import PRECISION_DTYPES
from stride.config.schema import ParallelConfig
from stride.models.plan import blocks_of
from stride.parallel.comm_hooks import CommTimer, register_comm_hook
from stride.parallel.lazy_types import is_fsdp_module


def persistent_buffers(module: nn.Module) -> dict[str, torch.Tensor]:
    """Buffers that are model state (in the state dict); the others are derived constants.

    DDP broadcasts every buffer from rank 0 before each forward (`broadcast_buffers`): a sync point
    per step. Non-persistent buffers (the transformers' RoPE tables) are recomputed identically on
    every rank from the config and never saved, so only persistent ones (BatchNorm statistics, say)
    need it."""
    saved = set(module.state_dict())
    return {n: b for n, b in module.named_buffers() if n in saved}


def buffer_sync_kwargs(ddp_class: type, sync: bool) -> dict[str, bool]:
    """DDP's switch for the per-forward buffer broadcast, by this torch's name for it: `forward_sync_buffers`
    in torch 2.13 (where `broadcast_buffers` warns), `broadcast_buffers` before (torch 2.11, the H200
    image's, refuses the new name: every DDP run failed there)."""
    names = inspect.signature(ddp_class.__init__).parameters
    return {"forward_sync_buffers": sync} if "forward_sync_buffers" in names else {"broadcast_buffers": sync}


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
        **buffer_sync_kwargs(DDP, bool(persistent_buffers(module))),
    )
    timer = register_comm_hook(ddp, p, mesh.get_group())
    return ddp, timer


def apply_fsdp(model: nn.Module, mesh: DeviceMesh, p: ParallelConfig) -> nn.Module:
    """fully_shard each block, then the root (embedding, final norm, head) as the last unit.

    Per-block units let block i+1's all-gather overlap block i's compute; the root's
    reshard_after_forward is False because its parameters are needed first in backward anyway.
    """
    dtype = None if p.mp_param_dtype == "none" else PRECISION_DTYPES[p.mp_param_dtype]
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # here: see stride.parallel.lazy_types

    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)
    blocks = blocks_of(model)
    if blocks is not None:
        for block in blocks:
            fully_shard(block, mesh=mesh, reshard_after_forward=p.reshard_after_forward, mp_policy=mp)
    fully_shard(model, mesh=mesh, reshard_after_forward=False, mp_policy=mp)
    return model


@contextlib.contextmanager
def grad_sync(model: nn.Module | None, sync: bool) -> Iterator[None]:
    """Communicate gradients in this backward only when `sync` (the last accumulation micro-step)."""
    if model is None or sync:
        if is_fsdp_module(model):
            model.set_requires_gradient_sync(True)  # type: ignore[operator]
        yield
    elif isinstance(model, DDP):
        with model.no_sync():
            yield
    elif is_fsdp_module(model):
        model.set_requires_gradient_sync(False)  # type: ignore[operator]
        yield
    else:
        yield


def sync_replicas(module: nn.Module, group: dist.ProcessGroup) -> None:
    """Every replica starts from the group's first rank's parameters and buffers (as DDP's constructor)."""
    src = dist.get_global_rank(group, 0)
    with torch.no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            dist.broadcast(t.data, src=src, group=group)


def mean_grads_over(params: list[torch.Tensor], group: dist.ProcessGroup, bucket_mb: float) -> None:
    """Replace each gradient by its mean over `group`: one all-reduce per `bucket_mb` of flattened gradients.

    For a pipeline whose weight-gradient pass (zero-bubble schedules) sets `.grad` with
    `torch.autograd.grad`: DDP's reducer, hooked on gradient accumulation, never sees those
    gradients, so replicas would step on their own. This runs after the whole schedule, so none
    of it overlaps backward (DDP overlaps its buckets with the remaining backward).
    """
    grads = [p.grad for p in params if p.grad is not None]
    n = dist.get_world_size(group)
    limit = max(1, int(bucket_mb * 2**20))
    bucket: list[torch.Tensor] = []
    size = 0
    for i, g in enumerate(grads):
        bucket.append(g)
        size += g.numel() * g.element_size()
        if size >= limit or i == len(grads) - 1:
            for same in _by_dtype(bucket):
                flat = torch._utils._flatten_dense_tensors(same)
                dist.all_reduce(flat, group=group)
                flat.div_(n)
                for g_, v in zip(same, torch._utils._unflatten_dense_tensors(flat, same), strict=True):
                    g_.copy_(v)
            bucket, size = [], 0


def _by_dtype(tensors: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    groups: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault(t.dtype, []).append(t)
    return list(groups.values())
