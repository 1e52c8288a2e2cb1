"""The worker of the tests that read a run's closing summary under a process group (test_parallel_tp_mfu,
test_parallel_layout): train each named run once on the process group already initialised and have rank 0 write
its summary (Trainer.fit's, which `stride train`'s ranks write as summary.json) to `NAME.json`. It runs in the
launches tests/parallel's modules share (`run_names`, from combined_worker.py), or alone: `torchrun
--nproc-per-node=4 summary_worker.py OUT tp_mfu_fsdp_tp`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

from stride.config import load_config
from stride.train.trainer import Trainer

# test_parallel_tp_mfu: the tiny transformer with FLOPs counted, TP inside data parallelism (4 ranks)
TP_MFU = ["model.d_model=32", "model.n_layers=2", "model.n_heads=4", "data.n_assets=4", "data.n_steps=600",
          "data.seq_len=16", "train.batch_size=8", "train.steps=2", "train.val_every=0", "train.threads=1",
          "metrics.flops=true", "metrics.skip_steps=0"]
# test_parallel_layout: an MLP under FSDP2 with bf16 parameters in its mixed precision (2 ranks)
FSDP_BF16 = ["model.name='mlp'", "data.n_assets=4", "data.n_steps=1024", "data.seq_len=8", "data.horizons=[1, 5]",
             "train.batch_size=32", "train.val_every=0", "train.threads=1", "metrics.progress=false", "train.steps=3",
             "parallel.dp_shard=2", "parallel.mp_param_dtype='bf16'"]
RUNS = {"tp_mfu_fsdp_tp": [*TP_MFU, "parallel.dp_shard=2", "parallel.tp=2"], "fsdp_bf16": FSDP_BF16}


def run_names(out_dir: Path, names: list[str]) -> None:
    for name in names:
        cfg = load_config(overrides=[*RUNS[name], "metrics.progress=false"])
        summary = Trainer(config=cfg, write_run_dir=False).fit().summary
        if dist.get_rank() == 0:
            (out_dir / f"{name}.json").write_text(json.dumps(summary, default=str))
        dist.barrier()


if __name__ == "__main__":
    dist.init_process_group("gloo")
    run_names(Path(sys.argv[1]), sys.argv[2].split(","))
    dist.destroy_process_group()
