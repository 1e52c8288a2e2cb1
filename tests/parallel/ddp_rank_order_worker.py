"""One gloo rank of tests/parallel/test_ddp_rank_order.py: DDP through `apply_ddp`, trained uninterrupted and with
DDP built anew part way (what a resumed process does), in deterministic mode.

Run with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set; argv: OUT (a folder) and the `[parallel]` overrides as
KEY=VALUE (ddp_bucket_mb=0.001, comm_timing=false, ...; piece_bytes=N: the hook all-gathers in pieces of N bytes).
Writes OUT/rank<r>.pt: per variant the final parameters
of both runs, step 1's all-reduced gradients, and this rank's local gradients of step 1 in float32 and float64.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from stride.config.schema import ParallelConfig
from stride.models.transformer import TimeSeriesTransformer
from stride.parallel import comm_hooks
from stride.parallel.data_parallel import apply_ddp

STEPS, REBUILD_AT = 6, 4  # the "resumed" run builds DDP again before step 4


def make_model(dtype: torch.dtype = torch.float32) -> nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank and in both runs
    return TimeSeriesTransformer(7, 16, 3, d_model=32).to(dtype)


def batch(rank: int, step: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own data, as DDP's shards
    return torch.randn(8, 16, 7, generator=g).to(dtype), torch.randn(8, 3, generator=g).to(dtype)


def train(p: ParallelConfig, mesh, rank: int, rebuild_at: int | None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Final parameters and step 1's averaged gradients; with `rebuild_at`, a fresh model, optimizer and DDP
    take over the state before that step (an in-memory resume: only DDP's reducer starts anew)."""
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ddp, _ = apply_ddp(model, mesh, p, torch.device("cpu"))
    first: list[torch.Tensor] = []
    for step in range(1, STEPS + 1):
        if step == rebuild_at:
            resumed = make_model()
            resumed.load_state_dict(model.state_dict())
            opt_state = opt.state_dict()
            del ddp, opt
            model = resumed
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
            opt.load_state_dict(opt_state)
            ddp, _ = apply_ddp(model, mesh, p, torch.device("cpu"))
        x, y = batch(rank, step)
        nn.functional.mse_loss(ddp(x), y).backward()
        if step == 1:
            first = [q.grad.detach().clone() for q in model.parameters()]
        opt.step()
        opt.zero_grad(set_to_none=True)
    return [q.detach().clone() for q in model.parameters()], first


def local_grads(rank: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """This rank's own gradients of step 1, without DDP."""
    model = make_model(dtype)
    x, y = batch(rank, 1, dtype)
    nn.functional.mse_loss(model(x), y).backward()
    return [q.grad.detach().clone() for q in model.parameters()]


def main() -> None:
    out = Path(sys.argv[1])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)  # train.deterministic = true
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        variants: dict[str, dict] = {}
        for spec in sys.argv[2:] or [""]:
            overrides = dict(kv.split("=") for kv in spec.split(",") if kv)
            comm_hooks.GATHER_PIECE_BYTES = int(overrides.pop("piece_bytes", 4 * 2**20))
            fields = {f.name: f for f in dataclasses.fields(ParallelConfig)}
            typed = {k: (v == "true") if fields[k].type in (bool, "bool") else float(v) for k, v in overrides.items()}
            p = ParallelConfig(**typed)
            uninterrupted, first = train(p, mesh, rank, None)
            resumed, _ = train(p, mesh, rank, REBUILD_AT)
            variants[spec] = {"uninterrupted": uninterrupted, "resumed": resumed, "first": first}
        torch.save({"variants": variants, "local32": local_grads(rank, torch.float32),
                    "local64": local_grads(rank, torch.float64)}, out / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
