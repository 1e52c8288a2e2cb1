"""Runs under torchrun: trains the tiny test workload once per named strategy in one process group.

One launch serves many strategies because starting processes costs more than these runs. Rank 0
writes `<out>/<strategy>.json` (loss per step, summary fields) and `<out>/<strategy>.pt` (the full,
gathered parameters via torch.distributed.checkpoint.state_dict). Also imported by the tests for
the shared config and the single-process reference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

# Small enough for 4 processes on 2 cores; tokens (16) and hidden sizes divisible by tp = 2.
BASE = [
    "model.d_model=32", "model.n_layers=2", "model.n_heads=4",
    "data.n_assets=4", "data.n_steps=600", "data.seq_len=16",
    "train.steps=6", "train.batch_size=8", "train.threads=1", "train.val_every=0",
    "optim.warmup_steps=0", "optim.lr=3e-3",
    "metrics.log_every=1", "metrics.progress=false", "metrics.flops=false", "metrics.skip_steps=1",
]

STRATEGIES: dict[str, list[str]] = {
    # 2 processes
    "ddp": [],
    "ddp_accum": ["train.grad_accum=2"],
    "ddp_fp16": ["parallel.comm_hook='fp16'"],
    "ddp_bf16": ["parallel.comm_hook='bf16'"],
    "ddp_powersgd": ["parallel.comm_hook='powersgd'"],
    "fsdp": ["parallel.dp_shard=2"],
    "fsdp_accum": ["parallel.dp_shard=2", "train.grad_accum=2"],
    "fsdp_zero2_bf16": ["parallel.dp_shard=2", "parallel.reshard_after_forward=false",
                        "parallel.mp_param_dtype='bf16'"],
    "tp": ["parallel.tp=2"],
    "tp_nosp": ["parallel.tp=2", "parallel.sequence_parallel=false"],
    "fsdp_ac": ["parallel.dp_shard=2", "train.activation_checkpointing='full'"],
    "tp_ac": ["parallel.tp=2", "train.activation_checkpointing='full'"],
    # 4 processes
    "fsdp_tp": ["parallel.dp_shard=2", "parallel.tp=2"],
    "hsdp": ["parallel.dp_replicate=2", "parallel.dp_shard=2"],
    "ddp4": [],
}
BY_WORLD = {2: [k for k in list(STRATEGIES)[:12]], 4: ["fsdp_tp", "hsdp", "ddp4"]}


def run(overrides: list[str]) -> tuple[dict, dict[str, torch.Tensor]]:
    """Train once; returns (result, full parameters) on every rank."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from stride.config import load_config
    from stride.train.trainer import Trainer

    cfg = load_config(overrides=BASE + overrides)
    trainer = Trainer(config=cfg, write_run_dir=False)
    res = trainer.fit()
    if trainer.par.enabled:
        full = get_model_state_dict(trainer.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    else:
        full = trainer.model.state_dict()
    losses = [r["loss"] for r in res.history if "loss" in r]
    keys = ("world_size", "parallel", "params_sha256", "samples_per_s", "per_rank_samples_per_s",
            "comm_exposed_s", "comm_hidden_s", "exposed_comm_fraction")
    return {"losses": losses, **{k: res.summary[k] for k in keys}}, {k: v.detach().clone() for k, v in full.items()}


def main(out: str, names: list[str]) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    out_dir = Path(out)
    for name in names:
        result, params = run(STRATEGIES[name])
        if dist.get_rank() == 0:
            torch.save(params, out_dir / f"{name}.pt")
            (out_dir / f"{name}.json").write_text(json.dumps(result))
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
