"""One rank of test_parallel_tp_optim: train a tiny model at tp = 2 once per `optim.name` in argv[1] (comma-separated),
one after another on one process group, and save this rank's copy of a replicated weight (a norm's) after each run
to argv[2] with the optimizer and the rank appended.

One launch serves both optimizers because starting the two processes costs more than these runs (as in
parallel_worker.py): each run is a fresh Trainer from the same seed, on the group this script initialised."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

from stride.config import load_config
from stride.train.trainer import Trainer

TINY = ["model.d_model=32", "model.n_layers=2", "model.n_heads=4", "data.n_assets=4", "data.n_steps=600",
        "data.seq_len=16", "train.batch_size=8", "train.steps=5", "train.val_every=0", "train.threads=1",
        "metrics.progress=false", "metrics.flops=false", "parallel.tp=2"]

if __name__ == "__main__":
    optimizers, out = sys.argv[1].split(","), sys.argv[2]
    dist.init_process_group("gloo")
    for opt in optimizers:
        tr = Trainer(config=load_config(overrides=[*TINY, f"optim.name={opt}"]), write_run_dir=False)
        tr.fit()
        w = dict(tr.model.named_parameters())["blocks.0.attn_norm.weight"].to_local().detach().clone()
        torch.save(w, f"{out}.{opt}.{os.environ['RANK']}")
        dist.barrier()
    dist.destroy_process_group()
