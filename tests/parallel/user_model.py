"""A user's own `module:factory` model, with names stride's models do not use, that declares its plan.

`model.name = "user_model:build"` trains it; its `parallel_plan` says its blocks are `stack` and how each
block's `up` / `down` projections split over tensor-parallel ranks, so it gets tensor and pipeline
parallelism without stride knowing any of its names. Under torchrun (as a script, or its `run_names` from
combined_worker.py) it is the worker of tests/parallel/test_user_model_plan.py: each named layout trains
once, rank 0 saves the full parameters and the losses.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from stride.config import ConfigError
from stride.models.plan import ParallelPlan, TensorParallelPlan


def _tensor_parallel(sequence_parallel: bool) -> TensorParallelPlan:
    if sequence_parallel:
        raise ConfigError("user_model runs tensor parallel without sequence parallel: "
                          "set `parallel.sequence_parallel` = false")
    return TensorParallelPlan(block={"up": ColwiseParallel(), "down": RowwiseParallel()})


def _check_tp(model: nn.Module, tp: int) -> None:
    hidden = model.stack[0].up.out_features
    if hidden % tp:
        raise ConfigError(f"user_model's hidden size {hidden} is not divisible by `parallel.tp` = {tp}")


class Layer(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.down(torch.tanh(self.up(self.ln(h))))


class UserForecaster(nn.Module):
    parallel_plan = ParallelPlan(blocks="stack", tensor_parallel=_tensor_parallel, check_tp=_check_tp)

    def __init__(self, n_features: int, n_horizons: int, width: int, depth: int) -> None:
        super().__init__()
        self.proj_in = nn.Linear(n_features, width)
        self.stack = nn.ModuleList(Layer(width) for _ in range(depth))
        self.readout = nn.Linear(width, n_horizons)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj_in(x) if self.proj_in is not None else x  # a pipeline stage drops what it does not run
        for layer in self.stack:
            h = layer(h)
        return self.readout(h[:, -1]) if self.readout is not None else h


def build(n_features: int, seq_len: int, n_horizons: int, width: int = 16, depth: int = 2) -> nn.Module:
    return UserForecaster(n_features, n_horizons, width, depth)


USER = ["model.name='user_model:build'", "data.n_assets=4", "data.n_steps=600", "data.seq_len=16",
        "train.steps=6", "train.batch_size=8", "train.threads=1", "train.val_every=0", "optim.warmup_steps=0",
        "optim.lr=3e-3", "metrics.log_every=1", "metrics.progress=false", "metrics.flops=false"]
LAYOUTS = {"tp": ["parallel.tp=2", "parallel.sequence_parallel=false"], "pp": ["parallel.pp=2"]}


def train(overrides: list[str]) -> tuple[list[float], dict[str, torch.Tensor], dict]:
    """(losses, every parameter of the full model, summary) of one run; collective under a process group."""
    from stride.config import load_config
    from stride.train.trainer import Trainer

    trainer = Trainer(config=load_config(overrides=USER + overrides), write_run_dir=False)
    result = trainer.fit()
    if trainer.par.pipeline is not None:
        full = trainer.par.pipeline.full_state(trainer.model)
    else:
        from torch.distributed.tensor import DTensor

        full = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone()
                for k, v in trainer.model.state_dict().items()}
    summary = {k: result.summary[k] for k in ("parallel", "world_size", "pipeline")}
    return [r["loss"] for r in result.history if "loss" in r], full, summary


def run_names(out_dir: Path, names: list[str]) -> None:
    """Each named layout in turn, on the process group already initialised; rank 0 writes the files."""
    import torch.distributed as dist

    for name in names:
        losses, params, summary = train(LAYOUTS[name])
        if dist.get_rank() == 0:
            torch.save(params, out_dir / f"{name}.pt")
            (out_dir / f"{name}.json").write_text(json.dumps({"losses": losses, **summary}))
        dist.barrier()


def main(out: str, names: list[str]) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    run_names(Path(out), names)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
