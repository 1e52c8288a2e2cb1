"""One rank of the resharding test: train 2 steps and save, or load; write a per-tensor hash of the full state.

Run with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set. Usage: python ckpt_reshard_worker.py save|load CKPT_DIR
OUT_JSON. World size 1 is one plain process with no process group: the test calls `run` in its own process.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

from stride.checkpoint.store import CheckpointStore


def build(world: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 6), nn.Linear(6, 4))
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        for m in model:
            if isinstance(m, nn.Linear):
                fully_shard(m, mesh=mesh)
        fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)


def full_hashes(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, str]:
    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    out = {}
    for prefix, sd in (("model", msd), ("optim", osd["state"])):
        flat = {f"{prefix}.{k}": v for k, v in sd.items()} if prefix == "model" else {
            f"optim.{p}.{k}": v for p, st in sd.items() for k, v in st.items()}
        for k, v in sorted(flat.items()):
            t = v.detach().cpu().contiguous().to(torch.float64)
            out[k] = hashlib.sha256(t.numpy().tobytes()).hexdigest()[:16]
    return out


def run(mode: str, ckpt: Path, out_json: Path, world: int = 1) -> None:
    """Save (after 2 training steps) or load at `world` ranks; rank 0 writes the full state's hashes to out_json."""
    model, opt = build(world)
    store = CheckpointStore(ckpt, log=lambda m: None)
    if mode == "save":
        g = torch.Generator().manual_seed(1)
        for _ in range(2):
            x, y = torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
        msd, osd = get_state_dict(model, opt)
        store.save({"model": msd, "optim": osd}, 2, {"config_hash": "reshard"})
    else:
        choice = store.newest_valid()
        assert choice.folder is not None, choice.describe()
        loaded = store.load(choice.folder, lambda keys: dict(zip(("model", "optim"), get_state_dict(model, opt),
                                                                 strict=True)))
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(model, opt, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"])
    hashes = full_hashes(model, opt)
    store.close()
    if world == 1 or dist.get_rank() == 0:
        out_json.write_text(json.dumps(hashes, indent=1))


def main() -> None:
    mode, ckpt, out_json = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    run(mode, ckpt, out_json, world)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
