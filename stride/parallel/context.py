"""What the trainer needs to know about parallelism, behind one object.

`Parallel.create` resolves and checks the layout (no process group yet), then initialises the
process group and the DeviceMesh; with one process nothing distributed is touched and every
method is the identity, so single-process runs are unchanged bit for bit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from stride.config.schema import OptimConfig, RunConfig
from stride.models.losses import LossFn
from stride.parallel import watchdog
from stride.parallel.comm_hooks import CommTimer
from stride.parallel.data_parallel import apply_ddp, apply_fsdp, grad_sync
from stride.parallel.layout import Layout, check_layout, env_world_size
from stride.parallel.lazy_types import is_dtensor
from stride.parallel.mesh import Mesh, init_mesh, local_device
from stride.parallel.pipeline_plan import PipelinePlan
from stride.parallel.tp import apply_tp
from stride.parallel.unused_keys import notice_unused_parallel_keys

if TYPE_CHECKING:  # imported where a pipeline is built: torch.distributed.pipelining pulls in torch._dynamo,
    # 0.5-0.9 s of CPU in every process at start-up (2-core Intel Xeon, 2026-12-05), which runs without
    # pipeline parallelism never use
    from stride.parallel.pipeline import Pipeline, SplitResult


class Parallel:
    def __init__(
        self, cfg: RunConfig, layout: Layout, mesh: Mesh | None, device: torch.device,
        plan: PipelinePlan | None = None,
    ) -> None:
        self.cfg, self.layout, self.mesh, self.device = cfg, layout, mesh, device
        self.sync_module: nn.Module | None = None  # the DDP / FSDP module whose grad sync we toggle
        self.comm_timer: CommTimer | None = None
        self.plan = plan  # pipeline parallelism (pp > 1)
        self.split: SplitResult | None = None
        self.pipeline: Pipeline | None = None

    @classmethod
    def create(cls, cfg: RunConfig, model: nn.Module, device: torch.device, tokens: int | None) -> Parallel:
        """Check the layout against world size, model and batch, then (N > 1) build the mesh."""
        layout, plan = check_layout(cfg, model, env_world_size(), tokens)
        # a [parallel] key this layout does not use (FSDP's mp_param_dtype on one process, say): said once, by rank 0
        notice_unused_parallel_keys(cfg.parallel, layout, rank=int(os.environ.get("RANK", "0")))
        if layout.world_size == 1:
            return cls(cfg, layout, None, device)
        watchdog.install(cfg.parallel.collective_timeout_s, int(os.environ.get("RANK", "0")))
        mesh = init_mesh(layout, device, cfg.parallel.backend, watchdog.backend_timeout())
        return cls(cfg, layout, mesh, device, plan)

    @staticmethod
    def device_for(device: torch.device) -> torch.device:
        # a bare "cuda" gets its index here (cuda:LOCAL_RANK, 0 without a launcher): torch.cuda.set_device and
        # NCCL's device_id refuse a device without one (seen on an H200 with torch 2.11)
        return local_device(device)

    # -- who am I -----------------------------------------------------------------------------
    @property
    def enabled(self) -> bool:
        return self.mesh is not None

    @property
    def rank(self) -> int:
        return self.mesh.rank if self.mesh else 0

    @property
    def is_rank0(self) -> bool:
        return self.rank == 0

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    # -- data: each data-parallel rank trains on its part of the global batch --------------------
    def shard_data(self, data: Any) -> Any:
        """Use the loader's own sharding where it has one (stride.data ShardedLoader)."""
        if self.enabled and self.layout.dp > 1 and hasattr(data, "shard"):
            data.shard(self.mesh.dp_rank, self.layout.dp)
        return data

    def local_batch(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's slice of a global batch; a batch already of the per-rank size passes as it is."""
        if not self.enabled:
            return x, y
        dp = self.layout.dp
        n = self.cfg.train.batch_size
        if not self.enabled or dp == 1 or len(x) != n:
            if self.enabled and dp > 1 and len(x) != n // dp:
                raise ValueError(f"a batch of {len(x)} samples is neither the global {n} nor the per-rank {n // dp}")
            return x, y
        r = self.mesh.dp_rank
        lo, hi = r * n // dp, (r + 1) * n // dp
        return x[lo:hi], y[lo:hi]

    # -- techniques, in the documented order (stride.train.apply) --------------------------------
    def apply_tp(self, model: nn.Module) -> int:
        if not self.enabled or self.layout.tp == 1:
            return 0
        return apply_tp(model, self.mesh.tp_mesh, self.cfg.parallel.sequence_parallel)

    def apply_data_parallel(self, model: nn.Module, wrapped: nn.Module) -> nn.Module:
        """FSDP2 shards `model` in place (then `wrapped` still runs it); DDP wraps `wrapped`."""
        if not self.enabled or self.layout.dp == 1:
            return wrapped
        p = self.cfg.parallel
        if self.layout.dp_shard > 1:
            apply_fsdp(model, self.mesh.dp_mesh, p)
            self.sync_module = model
            return wrapped
        ddp, self.comm_timer = apply_ddp(wrapped, self.mesh.dp_mesh, p, self.device)
        self.sync_module = ddp
        return ddp

    @contextlib.contextmanager
    def grad_sync(self, sync: bool):
        """Context for one micro-step's backward: communicate gradients only when `sync`."""
        with watchdog.collective(self._comm_label(sync)), grad_sync(self.sync_module, sync):
            yield

    def _comm_label(self, sync: bool) -> str:
        """What a micro-step's forward/backward communicates, for the watchdog's message."""
        what = []
        if self.layout.dp_shard > 1:
            what.append("FSDP all-gather" + (" and gradient reduce-scatter" if sync else ""))
        elif self.layout.dp > 1:
            what.append("DDP gradient all-reduce" if sync else "DDP, no gradient sync")
        if self.layout.tp > 1:
            what.append("tensor-parallel collectives")
        return f"forward/backward ({', '.join(what) or 'no collectives'})"

    def begin_step(self, step: int) -> None:
        """The step the loop starts (named in a hung-collective message)."""
        watchdog.set_step(step)

    def optim_config(self, o: OptimConfig, model: nn.Module) -> OptimConfig:
        """foreach/fused kernels take tensors of one kind on one mesh: fall back to the for-loop otherwise (torch's
        optimizers only: stride's own have one step each, and `optim.impl` is refused for them)."""
        from stride.optim.factory import TORCH_IMPL_OPTIMIZERS

        kinds = {(p.device_mesh, p.placements) if is_dtensor(p) else None for p in model.parameters()}
        if len(kinds) > 1 and o.impl != "for-loop" and o.name in TORCH_IMPL_OPTIMIZERS:
            return dataclasses.replace(o, impl="for-loop")
        return o

    # -- pipeline parallelism (stride.parallel.pipeline) -------------------------------------------
    @property
    def pipelined(self) -> bool:
        return self.plan is not None

    def split_pipeline(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn, count_flops: bool,
        autocast: Callable[[], contextlib.AbstractContextManager[Any]],
    ) -> int | None:
        """Prune `model` in place to this rank's stages (x, y: this rank's batch of one step).

        Returns the FLOPs per step of the mean rank of the pipeline (if counted), counted before TP: its TP
        group's (see `rank_flops`)."""
        from stride.parallel.pipeline import split_for_rank

        assert self.plan is not None and self.mesh is not None
        self.split = split_for_rank(model, self.plan, self.mesh.pp_rank, x, y, loss_fn,
                                    count_flops=count_flops, autocast=autocast)
        if self.split.flops is None:
            return None
        # Per rank means the mean over the pipeline's ranks (stages differ: embedding, head).
        assert self.mesh.pp_mesh is not None
        total = torch.tensor([float(self.split.flops)], dtype=torch.float64, device=self.device)
        dist.all_reduce(total, group=self.mesh.pp_mesh.get_group())
        return int(total.item()) // self.plan.pp

    def rank_flops(self, counted: int | None) -> int | None:
        """One rank's FLOPs per step from those counted on the model before TP: 1/tp of them.

        The ranks of a TP group read the same batch, so a count on the unsharded model is the whole group's
        work (DDP / FSDP ranks count their own batch already). MFU counts model FLOPs, so the group's are
        shared equally: parts TP leaves replicated (the embedding, final norm and head) count once, not once a rank.
        """
        return None if counted is None else counted // self.layout.tp

    def build_pipeline(self, model: nn.Module, loss_fn: LossFn) -> Pipeline:
        """Stages (compiled per block, then FSDP2 / DDP) and the schedule; after TP and AC."""
        from stride.parallel.pipeline import Pipeline

        assert self.plan is not None and self.mesh is not None and self.split is not None
        self.pipeline = Pipeline.build(model, self.split, self.plan, self.mesh, self.cfg.parallel, self.device,
                                       loss_fn, self.cfg.train.compile)
        return self.pipeline

    def plan_summary(self) -> dict[str, Any] | None:
        """The pipeline's shape for summary.json (None without pipeline parallelism)."""
        if self.plan is None or self.split is None:
            return None
        return {
            "schedule": self.plan.schedule,
            "stages": self.plan.n_stages,
            "stages_per_rank": self.plan.stages_per_rank,
            "microbatches": self.plan.n_microbatches,
            "layers_per_stage": [len(r) for r in self.split.ranges],
            "boundary_shape": self.pipeline.boundary_shape if self.pipeline else None,
        }

    # -- reductions -------------------------------------------------------------------------
    def mean(self, value: torch.Tensor) -> torch.Tensor:
        """Mean over all ranks (TP ranks hold equal values, so this is the data-parallel mean)."""
        if not self.enabled:
            return value
        v = value.detach().clone().float().to(self.device)
        with watchdog.collective("loss all-reduce (mean over ranks)"):
            dist.all_reduce(v, op=dist.ReduceOp.SUM)
        return v / self.world_size

    def sum_over_ranks(self, values: list[float]) -> list[float]:
        """Each of `values` summed over every rank (float64): one all-reduce."""
        if not self.enabled:
            return values
        v = torch.tensor(values, dtype=torch.float64, device=self.device)
        with watchdog.collective("validation sums all-reduce"):
            dist.all_reduce(v, op=dist.ReduceOp.SUM)
        return v.tolist()

    def val_slice(self, n: int) -> tuple[int, int, bool]:
        """This rank's rows [lo, hi) of an n-sample validation batch, and whether it counts them: each data-parallel
        replica evaluates its 1/dp of every batch. A batch of fewer samples than replicas is run whole by every
        rank (an FSDP forward is a collective: every rank runs every batch) and counted by replica 0 alone."""
        dp = self.layout.dp if self.enabled else 1
        if dp == 1:
            return 0, n, True
        r = self.mesh.dp_rank
        if n < dp:
            return 0, n, r == 0
        return r * n // dp, (r + 1) * n // dp, True

    def max_over_ranks(self, value: float) -> float:
        """The largest of each rank's `value` (one all-reduce): a figure only rank 0 can read, given to every rank."""
        if not self.enabled:
            return value
        v = torch.tensor([value], dtype=torch.float64, device=self.device)
        with watchdog.collective("all-reduce (max over ranks)"):
            dist.all_reduce(v, op=dist.ReduceOp.MAX)
        return float(v[0])

    def max_with_rank(self, value: int | None) -> tuple[int | None, int]:
        """The largest of each rank's `value` (None where a rank has none) and the lowest rank that holds it: a
        node must hold the fullest rank's memory, which under pp or uneven shards need not be rank 0's."""
        if not self.enabled:
            return value, 0
        v = torch.tensor([-1 if value is None else int(value), -self.rank], dtype=torch.int64)
        got = [torch.zeros_like(v) for _ in range(self.world_size)]
        with watchdog.collective("peak memory all-gather (max over ranks)"):
            dist.all_gather(got, v)
        best = max(got, key=lambda t: (int(t[0]), int(t[1])))
        return (None if int(best[0]) < 0 else int(best[0])), -int(best[1])

    def clip_grad_norm(self, params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
        """Global L2 grad norm and clipping over this layout (see `clip_grad_norm`)."""
        if not self.enabled:  # one process, plain tensors: torch's own, without the per-step DTensor scan
            return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
        group = self.pipeline.group if self.pipeline is not None else None
        return clip_grad_norm(params, max_norm, self.device, pipeline_group=group)


def clip_grad_norm(
    params: list[torch.Tensor], max_norm: float, device: torch.device, pipeline_group: Any = None
) -> torch.Tensor:
    """Global L2 grad norm and clipping; grads may be DTensors on different meshes (FSDP x TP) and,
    under pipeline parallelism, spread over the stages of `pipeline_group` (squared norms summed)."""
    grads = [p.grad for p in params if p.grad is not None]
    if pipeline_group is None and not any(is_dtensor(g) for g in grads):
        return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
    groups: dict[Any, list[torch.Tensor]] = defaultdict(list)
    for g in grads:
        key = (g.device_mesh, g.placements) if is_dtensor(g) else None
        groups[key].append(g)
    sq = torch.zeros((), dtype=torch.float32, device=device)
    for gs in groups.values():
        n = torch.nn.utils.get_total_norm(gs, 2.0, foreach=False)
        if is_dtensor(n):
            with watchdog.collective("gradient-norm all-reduce"):
                n = n.full_tensor()
        sq = sq + n.float() ** 2
    if pipeline_group is not None:
        with watchdog.collective("gradient-norm all-reduce over pipeline stages"):
            dist.all_reduce(sq, op=dist.ReduceOp.SUM, group=pipeline_group)
    total = sq.sqrt()
    coef = max_norm / (float(total) + 1e-6)
    if coef < 1 and math.isfinite(coef):
        for g in grads:
            g.mul_(coef)
    return total
