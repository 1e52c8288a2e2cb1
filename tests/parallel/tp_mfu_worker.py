"""The worker of test_parallel_tp_mfu: train the tiny transformer once per named layout on the process group already
initialised and have rank 0 write the run's FLOP and MFU figures (its closing summary's) to `LAYOUT.json`. It runs
in the launches tests/parallel's modules share (`run_names`, from combined_worker.py), or alone:
`torchrun --nproc-per-node=4 tp_mfu_worker.py OUT fsdp_tp`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

from stride.config import load_config
from stride.train.trainer import Trainer

TINY = ["model.d_model=32", "model.n_layers=2", "model.n_heads=4", "data.n_assets=4", "data.n_steps=600",
        "data.seq_len=16", "train.batch_size=8", "train.steps=2", "train.val_every=0", "train.threads=1",
        "metrics.flops=true", "metrics.skip_steps=0"]
# TP inside data parallelism (4 ranks)
LAYOUTS = {"fsdp_tp": ["parallel.dp_shard=2", "parallel.tp=2"]}
KEYS = ("world_size", "parallel", "flops_per_step", "achieved_flops_per_s", "step_time_s", "mfu", "peak_flops_per_s")


def run_names(out_dir: Path, names: list[str]) -> None:
    for name in names:
        cfg = load_config(overrides=[*TINY, *LAYOUTS[name], "metrics.progress=false"])
        summary = Trainer(config=cfg, write_run_dir=False).fit().summary
        if dist.get_rank() == 0:
            (out_dir / f"{name}.json").write_text(json.dumps({k: summary[k] for k in KEYS}))
        dist.barrier()


if __name__ == "__main__":
    dist.init_process_group("gloo")
    run_names(Path(sys.argv[1]), sys.argv[2].split(","))
    dist.destroy_process_group()
