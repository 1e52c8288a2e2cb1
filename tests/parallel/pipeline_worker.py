"""Under torchrun: one training step of the tiny transformer through each pipeline schedule.

Rank 0 writes `<out>/<schedule>.json` with the loss and every parameter's gradient gathered from
all stages, for comparison with one process in test_parallel_pipeline.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from stride.models.transformer import TimeSeriesTransformer
from stride.parallel.pipeline import build_pipeline


def make() -> tuple[TimeSeriesTransformer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = TimeSeriesTransformer(4, 16, 3, d_model=32, n_layers=4, n_heads=4)
    g = torch.Generator().manual_seed(1)
    return model, torch.randn(8, 16, 4, generator=g), torch.randn(8, 3, generator=g)


def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).mean()


def main(out: str, schedules: list[str]) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for name in schedules:
        model, x, y = make()
        stage, sched = build_pipeline(model, x[:2], mse, schedule=name, n_microbatches=4)
        losses: list[torch.Tensor] = []
        if rank == 0:
            sched.step(x)
        elif rank == world - 1:
            sched.step(target=y, losses=losses)
        else:
            sched.step()
        grads = {n: p.grad.tolist() for n, p in stage.named_parameters()}
        loss = float(torch.stack(losses).mean()) if losses else None
        gathered: list[dict] = [None] * world  # type: ignore[list-item]
        dist.all_gather_object(gathered, {"grads": grads, "loss": loss})
        if rank == 0:
            merged = {k: v for part in gathered for k, v in part["grads"].items()}
            result = {"loss": gathered[-1]["loss"], "grads": merged}
            (Path(out) / f"{name}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
