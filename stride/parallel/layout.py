"""The parallel layout: degrees resolved against the world size and checked against the model.

Everything here is arithmetic on the config and the single-device model, so an impossible layout
fails with a ConfigError before any process group or device mesh is created (a failure inside
`init_process_group` or a collective is a hang or an opaque error on every rank instead).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from torch import nn

from stride.config.errors import ConfigError
from stride.config.schema import ParallelConfig, RunConfig
from stride.models.plan import blocks_of, plan_of
from stride.parallel.pipeline_plan import PipelinePlan, plan_pipeline
from stride.parallel.tp import tp_plan


@dataclass(frozen=True)
class Layout:
    """Resolved degrees; `dp` = dp_replicate x dp_shard ranks see different data."""

    world_size: int
    dp_replicate: int
    dp_shard: int
    tp: int
    pp: int

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def strategy(self) -> str:
        """A short name of what runs: single, ddp, fsdp, hsdp, tp, fsdp+tp, ..."""
        parts = []
        if self.dp_shard > 1:
            parts.append("hsdp" if self.dp_replicate > 1 else "fsdp")
        elif self.dp_replicate > 1:
            parts.append("ddp")
        if self.tp > 1:
            parts.append("tp")
        if self.pp > 1:
            parts.append("pp")
        return "+".join(parts) or "single"


def env_world_size() -> int:
    """WORLD_SIZE as set by torchrun (1 outside a launcher)."""
    raw = os.environ.get("WORLD_SIZE", "1")
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"environment variable WORLD_SIZE = {raw!r} is not an integer") from exc


def resolve_layout(p: ParallelConfig, world_size: int) -> Layout:
    """Degrees whose product is `world_size`; all-1 degrees under N > 1 processes mean DDP over N."""
    degrees = {"dp_replicate": p.dp_replicate, "dp_shard": p.dp_shard, "tp": p.tp, "pp": p.pp}
    for key, val in degrees.items():
        if val < 1:
            raise ConfigError(f"`parallel.{key}` = {val} must be >= 1")
    product = p.dp_replicate * p.dp_shard * p.tp * p.pp
    if product == 1 and world_size > 1:
        degrees["dp_replicate"] = world_size
    elif product != world_size:
        shown = " x ".join(f"{k}={v}" for k, v in degrees.items())
        raise ConfigError(
            f"`[parallel]` degrees {shown} multiply to {product}, but the world size is {world_size} "
            f"(processes launched): make their product {world_size}, or launch {product} processes"
        )
    layout = Layout(world_size, **degrees)
    if layout.tp > 1 and layout.dp_replicate > 1 and layout.dp_shard == 1:
        raise ConfigError(
            f"`parallel.tp` = {layout.tp} with `parallel.dp_replicate` = {layout.dp_replicate}: DDP does not take "
            "tensor-parallel (DTensor) parameters; use `parallel.dp_shard` for data parallelism with TP"
        )
    return layout


def check_model(layout: Layout, model: nn.Module, tokens: int | None, sequence_parallel: bool) -> None:
    """For tp > 1: the model declares a tensor-parallel plan and its own checks pass (heads, hidden sizes);
    sequence parallel has tokens to split. Pipeline: check_pipeline."""
    if layout.tp == 1:
        return
    if blocks_of(model) is None:
        raise ConfigError(f"`parallel.tp` = {layout.tp} needs the model's blocks in `model.{plan_of(model).blocks}` "
                          "(an nn.ModuleList)")
    plan = tp_plan(model, sequence_parallel)  # declared, or a ConfigError
    name = type(model).__name__
    for i, block in enumerate(blocks_of(model) or ()):
        missing = [m for m in plan.block if not _has(block, m)]
        if missing:
            raise ConfigError(f"`parallel.tp` = {layout.tp}: block {i} ({type(block).__name__}) has no "
                              f"{', '.join(missing)}, which {name}'s tensor-parallel plan names")
    missing = [m for m in plan.root if not _has(model, m)]
    if missing:
        raise ConfigError(f"`parallel.tp` = {layout.tp}: {name} has no {', '.join(missing)}, which its tensor-parallel "
                          "plan names" + ("; set `parallel.sequence_parallel` = false" if sequence_parallel else ""))
    check = plan_of(model).check_tp
    if check is not None:
        check(model, layout.tp)
    if sequence_parallel and tokens is not None and tokens % layout.tp:
        raise ConfigError(
            f"sequence parallel splits the {tokens} tokens of a window over `parallel.tp` = {layout.tp} ranks: "
            "make seq_len / patch_len divisible by tp, or set `parallel.sequence_parallel` = false"
        )


def _has(module: nn.Module, name: str) -> bool:
    try:
        module.get_submodule(name)
    except AttributeError:
        return False
    return True


def check_precision(layout: Layout, precision: str, mp_param_dtype: str = "none") -> None:
    """fp16's loss scaler cannot unscale a tensor-parallel model's gradients: they mix DTensors (the sharded
    layers') and plain tensors (the rest) in one foreach call, which torch refuses mid-step (a traceback after
    the launch). FSDP2 alone (every parameter a DTensor) scales fine. FSDP2 computing in fp16
    (`parallel.mp_param_dtype`) needs the loss scaler, which only `train.precision` = 'fp16' runs."""
    if layout.tp > 1 and precision == "fp16":
        raise ConfigError(
            f"`train.precision` = 'fp16' with `parallel.tp` = {layout.tp}: the fp16 loss scaler cannot unscale "
            "tensor-parallel gradients (DTensor and plain tensors mixed); use 'bf16' (no loss scaling needed) or 'fp32'"
        )
    if layout.dp_shard > 1 and mp_param_dtype == "fp16" and precision != "fp16":
        raise ConfigError(
            f"`parallel.mp_param_dtype` = 'fp16' with `train.precision` = {precision!r}: FSDP would compute and take "
            "gradients in fp16 without loss scaling (small gradients flush to zero); set `train.precision` = 'fp16' "
            "(dynamic loss scaling) or `parallel.mp_param_dtype` = 'bf16'"
        )


def compute_precision(precision: str, layout: Layout | None, mp_param_dtype: str) -> str:
    """The dtype the model's matmuls run in (MFU's peak, summary.json `compute_precision`): `train.precision`'s
    autocast, else FSDP2's `mp_param_dtype` where FSDP runs (dp_shard > 1: parameters gathered in it), else fp32."""
    if precision != "fp32":
        return precision
    if layout is not None and layout.dp_shard > 1 and mp_param_dtype != "none":
        return mp_param_dtype
    return precision


def check_batch(layout: Layout, batch_size: int, grad_accum: int) -> None:
    """Every data-parallel rank gets the same whole number of samples per micro-batch."""
    if batch_size % (layout.dp * grad_accum):
        raise ConfigError(
            f"`train.batch_size` = {batch_size} does not split into {layout.dp} data-parallel ranks x "
            f"`train.grad_accum` = {grad_accum} equal micro-batches (make it a multiple of {layout.dp * grad_accum})"
        )


def check_layout(
    cfg: RunConfig, model: nn.Module, world_size: int, tokens: int | None,
) -> tuple[Layout, PipelinePlan | None]:
    """Every layout check (degrees, model, batch, pipeline); a ConfigError naming the keys if impossible.

    Each rank runs it before its process group (Parallel.create); `stride train --nproc` runs it once
    before launching any rank (stride.launch.preflight).
    """
    layout = resolve_layout(cfg.parallel, world_size)
    check_precision(layout, cfg.train.precision, cfg.parallel.mp_param_dtype)
    check_model(layout, model, tokens, cfg.parallel.sequence_parallel)
    check_batch(layout, cfg.train.batch_size, cfg.train.grad_accum)
    return layout, check_pipeline(layout, cfg, model)


def check_pipeline(layout: Layout, cfg: RunConfig, model: nn.Module) -> PipelinePlan | None:
    """The pipeline plan for `parallel.pp` > 1: stages vs layers, microbatches vs batch and schedule."""
    if layout.pp == 1:
        return None
    blocks = blocks_of(model)
    if blocks is None:
        raise ConfigError(f"`parallel.pp` = {layout.pp} needs the model's layers in `model.{plan_of(model).blocks}` "
                          "(an nn.ModuleList; a model names it in its `parallel_plan`, see stride.models.plan)")
    t = cfg.train
    return plan_pipeline(cfg.parallel, len(blocks), t.batch_size // layout.dp, t.grad_accum, compile_mode=t.compile)
