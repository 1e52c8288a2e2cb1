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
from stride.parallel.pipeline_plan import PipelinePlan, plan_pipeline
from stride.parallel.tp import ATTN_IN, ENTRY_MODULES, entry_module


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
    """Heads divisible by tp, hidden sizes divisible by tp, tokens for SP (pipeline: check_pipeline)."""
    blocks = getattr(model, "blocks", None)
    n_layers = len(blocks) if isinstance(blocks, nn.ModuleList) else None
    if layout.tp == 1:
        return
    if n_layers is None:
        raise ConfigError(f"`parallel.tp` = {layout.tp} needs the model's blocks in `model.blocks` (nn.ModuleList)")
    for i, block in enumerate(blocks):
        attn, mlp = getattr(block, "attn", None), getattr(block, "mlp", None)
        if attn is None or mlp is None or not all(hasattr(mlp, w) for w in ("w1", "w2", "w3")) \
                or not all(isinstance(getattr(attn, w, None), nn.Linear) for w in (*ATTN_IN, "wo")):
            raise ConfigError(
                f"`parallel.tp` = {layout.tp}: block {i} ({type(block).__name__}) has no attn.wq,wk,wv,wo Linears / "
                "mlp.w1,w2,w3; the TP plan in stride.parallel.tp addresses the names of stride.models.layers"
            )
        heads = getattr(attn, "n_heads", None)
        if heads is not None and heads % layout.tp:
            raise ConfigError(
                f"`model.n_heads` = {heads} is not divisible by `parallel.tp` = {layout.tp}"
            )
        # a contiguous split of each projection's rows is whole heads only if each has n_heads x head_dim rows
        head_dim = getattr(attn, "head_dim", None)
        rows = {w: getattr(attn, w).out_features for w in ATTN_IN}
        if heads is None or head_dim is None or set(rows.values()) != {heads * head_dim}:
            raise ConfigError(
                f"`parallel.tp` = {layout.tp}: block {i}'s attention projections have {rows} output rows, "
                f"not n_heads ({heads}) x head_dim ({head_dim}) each, so a split by rows is not a split by heads"
            )
        hidden = mlp.w1.out_features
        if hidden % layout.tp:
            raise ConfigError(
                f"the MLP hidden size {hidden} (block {i}) is not divisible by `parallel.tp` = {layout.tp}"
            )
    if sequence_parallel:
        missing = [what for what, ok in (
            (f"no input module named {' or '.join(ENTRY_MODULES)}", entry_module(model) is not None),
            ("no final norm named `norm`", isinstance(getattr(model, "norm", None), nn.Module)),
        ) if not ok]
        if missing:  # the plan cuts the entry's output to each rank's tokens and gathers them at `norm`
            raise ConfigError(
                f"`parallel.sequence_parallel` with `parallel.tp` = {layout.tp}: {type(model).__name__} has "
                f"{' and '.join(missing)}; set `parallel.sequence_parallel` = false"
            )
    d_model = model.blocks[0].mlp.w1.in_features
    if d_model % layout.tp:
        raise ConfigError(f"d_model = {d_model} is not divisible by `parallel.tp` = {layout.tp}")
    if sequence_parallel and tokens is not None and tokens % layout.tp:
        raise ConfigError(
            f"sequence parallel splits the {tokens} tokens of a window over `parallel.tp` = {layout.tp} ranks: "
            "make seq_len / patch_len divisible by tp, or set `parallel.sequence_parallel` = false"
        )


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
    check_model(layout, model, tokens, cfg.parallel.sequence_parallel)
    check_batch(layout, cfg.train.batch_size, cfg.train.grad_accum)
    return layout, check_pipeline(layout, cfg, model)


def check_pipeline(layout: Layout, cfg: RunConfig, model: nn.Module) -> PipelinePlan | None:
    """The pipeline plan for `parallel.pp` > 1: stages vs layers, microbatches vs batch and schedule."""
    if layout.pp == 1:
        return None
    blocks = getattr(model, "blocks", None)
    n_layers = len(blocks) if isinstance(blocks, nn.ModuleList) else None
    t = cfg.train
    return plan_pipeline(cfg.parallel, n_layers, t.batch_size // layout.dp, t.grad_accum, compile_mode=t.compile)
