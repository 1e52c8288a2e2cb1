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

# The GPT-style token model (same blocks, embedding `tok`, next-token loss over every position).
TOKEN_LM = ["model.name='token_lm'", "data.source='stride.data.tokens:return_tokens'", "data.kwargs={vocab = 16}"]

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
    "tp_token_lm": [*TOKEN_LM, "parallel.tp=2"],
    # fused norm / SwiGLU / RoPE kernels (Triton's interpreter on CPU) on TP's local shards
    "tp_triton": ["parallel.tp=2", "train.kernels='triton'"],
    # 4 processes
    "fsdp_tp": ["parallel.dp_shard=2", "parallel.tp=2"],
    "hsdp": ["parallel.dp_replicate=2", "parallel.dp_shard=2"],
    "ddp4": [],
}
BY_WORLD = {2: [k for k in list(STRATEGIES)[:14]], 4: ["fsdp_tp", "hsdp", "ddp4"]}
# the single-process run each strategy is compared with (BASE alone unless named here)
REFERENCE = {"tp_token_lm": TOKEN_LM}


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
            "comm_exposed_s", "comm_hidden_s", "exposed_comm_fraction", "kernels")
    result = {"losses": losses, **{k: res.summary[k] for k in keys}}
    if trainer.n_tp:
        result.update(tp_facts(trainer))
    return result, {k: v.detach().clone() for k, v in full.items()}


def tp_facts(trainer) -> dict:
    """How attention is split: each rank's share of the attention weights, their placements on the
    tp mesh dim, and the collectives of one more forward+backward (CommDebugMode counts DTensor's)."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.debug import CommDebugMode

    local = total = 0
    placements = {}
    for name, p in trainer.model.named_parameters():
        if ".attn." not in name:
            continue
        total += p.numel()  # a DTensor's numel is the full tensor's
        local += p.to_local().numel() if isinstance(p, DTensor) else p.numel()
        if isinstance(p, DTensor):
            tp_dim = p.device_mesh.mesh_dim_names.index("tp")
            placements[name.replace("_checkpoint_wrapped_module.", "")] = str(p.placements[tp_dim])
    shares = [None] * dist.get_world_size()
    dist.all_gather_object(shares, local / total)
    x, y = trainer.next_batch()
    with CommDebugMode() as comm:
        trainer.loss_fn(trainer.wrapped(x), y).backward()
    trainer.model.zero_grad(set_to_none=True)
    counts = {str(op).split(".")[-1]: n for op, n in comm.get_comm_counts().items()}
    return {"attn_weight_share": shares, "attn_tp_placements": placements, "tp_comm_counts": counts}


def run_names(out_dir: Path, names: list[str]) -> None:
    """Each named strategy in turn, on the process group already initialised; rank 0 writes the files."""
    import torch.distributed as dist

    for name in names:
        result, params = run(STRATEGIES[name])
        if dist.get_rank() == 0:
            torch.save(params, out_dir / f"{name}.pt")
            (out_dir / f"{name}.json").write_text(json.dumps(result))
        dist.barrier()


def main(out: str, names: list[str]) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    run_names(Path(out), names)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
