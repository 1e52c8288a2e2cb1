"""Pipeline stages for a model that keeps its layers in `model.blocks` (torch.distributed.pipelining).

The tracer frontend (`pipeline()` with `SplitPoint`) splits the unchanged single-device model at
block boundaries, so no stage code is written by hand and parameter names stay the model's own.
Not yet wired into the Trainer (`parallel.pp` > 1 is a config error there): this builds the stage
and schedule a pipelined training step needs, and is tested against one process.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe, SplitPoint, pipeline
from torch.distributed.pipelining.schedules import PipelineScheduleSingle

from stride.config.errors import ConfigError

SCHEDULES: dict[str, type[PipelineScheduleSingle]] = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


def split_points(n_layers: int, stages: int) -> dict[str, SplitPoint]:
    """Begin stage s at block s * n_layers // stages: layers spread as evenly as they go."""
    if stages > n_layers:
        raise ConfigError(f"{stages} pipeline stages but the model has only {n_layers} layers")
    return {f"blocks.{s * n_layers // stages}": SplitPoint.BEGINNING for s in range(1, stages)}


def build_pipeline(
    model: nn.Module,
    example_microbatch: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    schedule: str = "1f1b",
    n_microbatches: int = 4,
    device: torch.device | None = None,
    group: dist.ProcessGroup | None = None,
) -> tuple[nn.Module, PipelineScheduleSingle]:
    """This rank's stage module (its slice of `model`) and the schedule that runs a step.

    Call `schedule.step(x)` on the first stage, `schedule.step(target=y, losses=out)` on the last
    (and `schedule.step()` in between); gradients land in the stage module's parameters.
    """
    if schedule not in SCHEDULES:
        raise ConfigError(f"pipeline schedule {schedule!r} is not one of {', '.join(SCHEDULES)}")
    stages = dist.get_world_size(group)
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise ConfigError(f"pipelining needs `model.blocks` (an nn.ModuleList); {type(model).__name__} has none")
    pipe = pipeline(model, mb_args=(example_microbatch,), split_spec=split_points(len(blocks), stages))
    stage = pipe.build_stage(dist.get_rank(group), device or torch.device("cpu"), group)
    return stage.submod, SCHEDULES[schedule](stage, n_microbatches, loss_fn=loss_fn)
