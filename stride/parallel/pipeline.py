"""Pipeline parallelism in the trainer: stages cut by module, run by torch.distributed.pipelining.

`split_for_rank` cuts the single-device model into `pp x stages_per_rank` stages
(stride.parallel.stage_split), checks that the chained stages compute what the whole model does,
counts this rank's FLOPs, and prunes the trainer's model in place to the parts this rank runs (its
parameter names stay the full model's). The trainer then applies TP and activation checkpointing
to the pruned model; `Pipeline.build` wraps each local stage (compile per block, FSDP2 or DDP over
the data-parallel mesh) in a `PipelineStage` and builds the schedule. Under TP, stages exchange
each TP rank's plain local part of the residual stream (stride.parallel.tp.boundary_shape).

One optimizer step is one `schedule.step` over `train.grad_accum x parallel.microbatches`
microbatches; the last stage computes the loss per microbatch and the mean is broadcast to every
rank of the pipeline (logging, the fault guard and clipping decisions see the same number).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.pipelining import PipelineStage, schedules
from torch.distributed.tensor import DTensor

from stride.config.errors import ConfigError
from stride.config.schema import ParallelConfig
from stride.kernels.compile_cache import isolate_inductor_cache
from stride.metrics.flops import count_train_flops
from stride.models.losses import LossFn
from stride.models.plan import blocks_of
from stride.parallel.data_parallel import apply_ddp, apply_fsdp, mean_grads_over, sync_replicas
from stride.parallel.mesh import Mesh
from stride.parallel.pipeline_plan import SCHEDULES, SPLIT_BACKWARD, PipelinePlan
from stride.parallel.stage_split import OuterParts, block_ranges, find_outer_parts, keep_stage_parts
from stride.parallel.tp import boundary_shape


def _meta(t: torch.Tensor, grad: bool) -> torch.Tensor:
    """Shape and dtype of an activation; those between stages carry gradients back."""
    return t.detach().to("meta").requires_grad_(grad and t.is_floating_point())


def _on_tp_rank(t: torch.Tensor, tp: int, sequence_parallel: bool) -> torch.Tensor:
    """The meta tensor of one TP rank's part of the activation `t` sent between stages."""
    shape = boundary_shape(t.shape, tp, sequence_parallel)
    return torch.empty(shape, dtype=t.dtype, device="meta").requires_grad_(t.requires_grad)


def _sum_loss(out: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
    """Stands in for the loss on stages before the last when counting FLOPs (a sum costs none)."""
    return out.float().sum()


@dataclasses.dataclass
class SplitResult:
    parts: OuterParts
    ranges: list[range]
    flops: int | None  # this rank's forward + backward FLOPs per optimizer step
    # per local stage: (input, output) of one microbatch as meta tensors, so stages start with
    # static shapes (no runtime shape inference, which runs a real backward that DDP miscounts)
    io: dict[int, tuple[torch.Tensor, torch.Tensor]]


def chain_stages(
    model: nn.Module, plan: PipelinePlan, xm: torch.Tensor,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> tuple[OuterParts, list[nn.Module], torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Every stage as a light copy of `model`, run one after another on the microbatch `xm`: (outer parts, stage
    views, the whole model's output, the chain's output, each stage's input). A model whose forward does not skip
    the parts a stage sets to None raises a ConfigError here. Also run by `stride train --nproc` before it
    launches (stride.launch.preflight, on meta tensors), so the error is said once, not by every rank."""
    ranges = block_ranges(plan.n_layers, plan.n_stages)
    inputs: list[torch.Tensor] = []
    # eval mode (dropout off) and a forked RNG: these forwards leave training's random stream alone
    was_training = model.training
    model.eval()
    try:
        with torch.random.fork_rng(devices=[xm.device] if xm.device.type == "cuda" else []):
            parts = find_outer_parts(model, xm)
            views = [
                keep_stage_parts(model, parts, ranges[s], s == 0, s == plan.n_stages - 1, in_place=False)
                for s in range(plan.n_stages)
            ]
            with torch.no_grad(), autocast():
                full = model(xm)
                h = xm
                try:
                    for view in views:
                        inputs.append(h)
                        h = view(h)
                except Exception as exc:
                    raise ConfigError(
                        f"`parallel.pp` = {plan.pp}: {type(model).__name__} cannot run as pipeline stages ({exc}); "
                        "its forward must skip the parts a stage sets to None (see TimeSeriesTransformer.forward)"
                    ) from exc
    finally:
        model.train(was_training)
    return parts, views, full, h, inputs


def split_for_rank(
    model: nn.Module,
    plan: PipelinePlan,
    pp_rank: int,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: LossFn,
    *,
    count_flops: bool,
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> SplitResult:
    """Prune `model` in place to this rank's stages, after checking the split on one microbatch.

    x, y: this rank's batch of one step. Every stage is first built as a light copy of the full
    model and the stages are chained on one microbatch: a model whose forward does not skip absent
    parts fails here with a ConfigError, on every rank alike, instead of inside the schedule; the
    chain's output must equal the whole model's.
    """
    mb = len(x) // plan.n_microbatches
    xm, ym = x[:mb], y[:mb]
    ranges = block_ranges(plan.n_layers, plan.n_stages)
    parts, views, full, h, inputs = chain_stages(model, plan, xm, autocast)
    if h.shape != full.shape or not torch.allclose(h.float(), full.float(), rtol=1e-5, atol=1e-6):
        raise ConfigError(
            f"`parallel.pp` = {plan.pp}: the chained stages of {type(model).__name__} do not compute what the "
            "whole model does (does its forward use the blocks in order, and nothing between them?)"
        )
    mine = plan.stages_of(pp_rank)
    outputs = [*inputs[1:], h]
    io = {s: (_meta(inputs[s], s > 0), _meta(outputs[s], True)) for s in mine}
    flops = None
    if count_flops:
        flops = 0
        for s in mine:
            fn = loss_fn if s == plan.n_stages - 1 else _sum_loss
            inp = inputs[s].float() if inputs[s].is_floating_point() else inputs[s]  # counted in fp32, as a plain run
            flops += count_train_flops(views[s], fn, inp, ym) * plan.n_microbatches
    keep = [i for s in mine for i in ranges[s]]
    keep_stage_parts(model, parts, keep, 0 in mine, plan.n_stages - 1 in mine, in_place=True)
    return SplitResult(parts, ranges, flops, io)


class _ComputeTimer:
    """Seconds spent in each stage's forward and backward chunks (host clock; see docs/parallel.md)."""

    def __init__(self) -> None:
        self.seconds = {"forward": 0.0, "backward": 0.0}

    def wrap(self, stage: PipelineStage) -> None:
        for method, phase in (("forward_one_chunk", "forward"), ("backward_one_chunk", "backward"),
                              ("backward_weight_one_chunk", "backward")):
            fn = getattr(stage, method)

            def timed(*args: Any, _fn: Any = fn, _phase: str = phase, **kwargs: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return _fn(*args, **kwargs)
                finally:
                    self.seconds[_phase] += time.perf_counter() - t0

            setattr(stage, method, timed)  # this stage object only

    def take(self) -> dict[str, float]:
        out, self.seconds = self.seconds, {"forward": 0.0, "backward": 0.0}
        return out


class Pipeline:
    """This rank's stages and the schedule that runs one training step over them."""

    def __init__(
        self, plan: PipelinePlan, mesh: Mesh, modules: list[nn.Module], stage_ids: list[int],
        schedule: Any, device: torch.device, timer: _ComputeTimer,
    ) -> None:
        self.plan, self.mesh, self.modules, self.stage_ids = plan, mesh, modules, stage_ids
        self.schedule, self.device, self.timer = schedule, device, timer
        assert mesh.pp_mesh is not None
        self.group = mesh.pp_mesh.get_group()
        self.pp_rank = mesh.pp_rank
        self.has_first = 0 in stage_ids
        self.last_rank = plan.rank_of(plan.n_stages - 1)
        self.has_last = self.pp_rank == self.last_rank
        # shape of one microbatch's activation sent between stages by this rank (TP: its local part)
        self.boundary_shape: list[int] = []
        # zero-bubble schedules under dp_replicate: the gradient mean over replicas, after the schedule
        self.reduce_grads: Callable[[], None] | None = None

    @classmethod
    def build(
        cls, model: nn.Module, split: SplitResult, plan: PipelinePlan, mesh: Mesh, p: ParallelConfig,
        device: torch.device, loss_fn: LossFn, compile_mode: str,
    ) -> Pipeline:
        """Stage modules of the pruned `model`, compiled per block and data-parallel, in a schedule."""
        stage_ids = plan.stages_of(mesh.pp_rank)
        if len(stage_ids) == 1:
            modules = [model]  # the pruned model is the stage: FSDP/DDP wrap it as in a plain run
        else:  # light copies sharing the pruned model's modules and parameters, one per stage
            modules = [
                keep_stage_parts(model, split.parts, split.ranges[s], s == 0, s == plan.n_stages - 1, in_place=False)
                for s in stage_ids
            ]
        if compile_mode != "off":
            # Per block, in place (module.compile keeps the class and the parameter names): the
            # stage's submodule must stay the FSDP/DDP module the schedule drives.
            isolate_inductor_cache()
            for block in blocks_of(model) or ():
                block.compile()
        layout = mesh.layout
        submods: list[nn.Module] = []
        for module in modules:
            if layout.dp_shard > 1:
                assert mesh.dp_mesh is not None
                apply_fsdp(module, mesh.dp_mesh, p)
                submods.append(module)
            elif layout.dp_replicate > 1 and plan.schedule in SPLIT_BACKWARD:
                # no DDP: its reducer never sees the weight-gradient pass's gradients; the pipeline
                # averages them over the replicas after the schedule instead (mean_grads_over)
                assert mesh.dp_mesh is not None
                sync_replicas(module, mesh.dp_mesh.get_group())
                submods.append(module)
            elif layout.dp_replicate > 1:
                assert mesh.dp_mesh is not None
                # comm timing measures DDP's bucket overlap in a plain backward; the schedule's
                # backward is split across microbatches, so it is off here
                ddp, _ = apply_ddp(module, mesh.dp_mesh, dataclasses.replace(p, comm_timing=False), device)
                submods.append(ddp)
            else:
                submods.append(module)
        assert mesh.pp_mesh is not None
        group = mesh.pp_mesh.get_group()
        timer = _ComputeTimer()
        stages = []
        for s, submod in zip(stage_ids, submods, strict=True):
            inp, out = split.io[s]
            if layout.tp > 1:  # between stages: this TP rank's local part of the residual stream
                inp = inp if s == 0 else _on_tp_rank(inp, layout.tp, p.sequence_parallel)
                out = out if s == plan.n_stages - 1 else _on_tp_rank(out, layout.tp, p.sequence_parallel)
            sent = list(inp.shape) if s > 0 else list(out.shape)  # what crosses a boundary, per rank
            stage = PipelineStage(submod, s, plan.n_stages, device, input_args=inp, output_args=out, group=group)
            timer.wrap(stage)
            stages.append(stage)
        schedule_cls = getattr(schedules, SCHEDULES[plan.schedule][0])
        schedule = schedule_cls(stages if plan.multi_stage else stages[0], plan.n_microbatches, loss_fn=loss_fn)
        pipe = cls(plan, mesh, modules, stage_ids, schedule, device, timer)
        pipe.boundary_shape = sent
        if layout.dp_shard == 1 and layout.dp_replicate > 1 and plan.schedule in SPLIT_BACKWARD:
            assert mesh.dp_mesh is not None
            params = list({id(q): q for m in modules for q in m.parameters() if q.requires_grad}.values())
            group_ = mesh.dp_mesh.get_group()
            pipe.reduce_grads = lambda: mean_grads_over(params, group_, p.ddp_bucket_mb)
        return pipe

    # -- training -----------------------------------------------------------------------------
    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward and backward of this rank's batch over all microbatches; the mean loss on every rank.

        Gradients (mean over the microbatches) are left in the parameters, reduced over the
        data-parallel ranks by the stage (FSDP reduce-scatter / DDP all-reduce after the last one)
        or, for zero-bubble schedules under dp_replicate, by `reduce_grads` after the schedule.
        """
        losses: list[torch.Tensor] = []
        args = (x,) if self.has_first else ()
        target = y if self.has_last else None
        self.schedule.step(*args, target=target, losses=losses if self.has_last else None, return_outputs=False)
        if self.reduce_grads is not None:
            self.reduce_grads()
        loss = torch.stack([v.detach().float() for v in losses]).mean() if self.has_last else torch.zeros(())
        return self.share(loss.to(self.device))

    def share(self, value: torch.Tensor) -> torch.Tensor:
        """`value` from the rank holding the last stage, on every rank of the pipeline."""
        value = value.detach().clone().float()
        dist.broadcast(value, group=self.group, group_src=self.last_rank)
        return value

    def compute_seconds(self) -> dict[str, float]:
        """Forward and backward compute of this rank's stages since the last call."""
        return self.timer.take()

    # -- validation: a forward-only pass through the stages in order ------------------------------
    def forward_only(self, x: torch.Tensor) -> torch.Tensor | None:
        """The model's output for the whole batch x on the last stage's rank (None on the others).

        Validation runs the stages one after another on the whole batch (no microbatches, no
        schedule): a pipeline schedule's eval re-derives its buffers at every train/eval switch and
        needs batches divisible into microbatches, neither of which validation can promise.
        """
        h: torch.Tensor | None = None
        for s in range(self.plan.n_stages):
            owner = self.plan.rank_of(s)
            if s > 0 and self.plan.rank_of(s - 1) != owner:
                prev = self.plan.rank_of(s - 1)
                if self.pp_rank == prev:
                    assert h is not None
                    self._send(h, owner)
                elif self.pp_rank == owner:
                    h = self._recv(prev)
            if self.pp_rank == owner:
                h = self.modules[self.stage_ids.index(s)](x if s == 0 else h)
        for module in self.modules:  # FSDP roots keep their gathered parameters after forward
            if isinstance(module, FSDPModule):
                module.reshard()
        return h if self.has_last else None

    def _send(self, h: torch.Tensor, dst: int) -> None:
        dtype = list(_DTYPES).index(h.dtype)
        meta = torch.tensor([h.dim(), dtype, *h.shape, *[0] * (6 - h.dim())], dtype=torch.int64, device=self.device)
        dist.send(meta, group=self.group, group_dst=dst)
        dist.send(h.contiguous(), group=self.group, group_dst=dst)

    def _recv(self, src: int) -> torch.Tensor:
        meta = torch.zeros(8, dtype=torch.int64, device=self.device)
        dist.recv(meta, group=self.group, group_src=src)
        ndim, dtype = int(meta[0]), list(_DTYPES)[int(meta[1])]
        h = torch.empty([int(v) for v in meta[2 : 2 + ndim]], dtype=dtype, device=self.device)
        dist.recv(h, group=self.group, group_src=src)
        return h

    # -- the full model across stages ------------------------------------------------------------
    def full_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Every parameter and buffer of the full model (all stages, gathered shards), on every rank."""
        local = {}
        for k, v in model.state_dict().items():
            if isinstance(v, torch.Tensor):
                t = v.detach()
                local[k] = (t.full_tensor() if isinstance(t, DTensor) else t).cpu()
        parts: list[dict[str, torch.Tensor] | None] = [None] * self.plan.pp
        dist.all_gather_object(parts, local, group=self.group)
        merged: dict[str, torch.Tensor] = {}
        for part in parts:
            merged.update(part or {})
        return merged


_DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2, torch.float64: 3, torch.int64: 4}
