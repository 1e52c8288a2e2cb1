"""The worker of test_parallel_tp_optim: train a tiny model at tp = 2 once per `optim.name`, one after another on
one process group, and save this rank's copy of a replicated weight (a norm's) after each run, to
`norm.OPTIMIZER.RANK` in the output folder. It runs in the launches tests/parallel's modules share (`run_names`,
from combined_worker.py), or alone: `torchrun --nproc-per-node=2 tp_optim_driver.py OUT adamw,adamw_triton`."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

from stride.config import load_config
from stride.train.trainer import Trainer

TINY = ["model.d_model=32", "model.n_layers=2", "model.n_heads=4", "data.n_assets=4", "data.n_steps=600",
        "data.seq_len=16", "train.batch_size=8", "train.steps=5", "train.val_every=0", "train.threads=1",
        "metrics.progress=false", "metrics.flops=false", "parallel.tp=2"]


def run_names(out_dir: Path, optimizers: list[str]) -> None:
    """Each optimizer in turn, a fresh Trainer from the same seed, on the process group already initialised."""
    for opt in optimizers:
        tr = Trainer(config=load_config(overrides=[*TINY, f"optim.name={opt}"]), write_run_dir=False)
        tr.fit()
        w = dict(tr.model.named_parameters())["blocks.0.attn_norm.weight"].to_local().detach().clone()
        torch.save(w, out_dir / f"norm.{opt}.{dist.get_rank()}")
        dist.barrier()


if __name__ == "__main__":
    dist.init_process_group("gloo")
    run_names(Path(sys.argv[1]), sys.argv[2].split(","))
    dist.destroy_process_group()
