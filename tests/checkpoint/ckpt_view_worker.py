"""One rank of the shared-folder tests: each rank its own copy of the checkpoint folder (node-local disk).

Run with RANK / WORLD_SIZE=2 / MASTER_ADDR / MASTER_PORT set. Usage: python ckpt_view_worker.py BASE OUT_DIR
Rank r's "node-local" folder is BASE/node<r>/...: the same path on two nodes, two folders. Phases:
probe (prepare() in per-rank folders), save (a save into per-rank folders), resume (a checkpoint saved into
a shared folder, then rank 1 given a copy whose step 2 holds other bytes in its own shard), and timing
(newest_valid on an intact shared checkpoint of STATE_MB megabytes). Each rank writes what it saw to OUT_DIR.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from stride.checkpoint import CheckpointError
from stride.checkpoint.store import CheckpointStore


def _state(step: int) -> dict[str, torch.Tensor]:
    n = max(1, int(float(os.environ.get("STATE_MB", "0.05")) * 2**20 / 4 / 2))
    g = torch.Generator().manual_seed(step * 10 + dist.get_rank())
    return {f"w{dist.get_rank()}": torch.randn(n, generator=g), "shared": torch.full((n,), float(step))}


def _try(fn) -> str | None:
    try:
        fn()
    except CheckpointError as exc:
        return str(exc)
    return None


def main() -> None:
    base, out = Path(sys.argv[1]), Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    seen: dict[str, object] = {}
    local = base / f"node{rank}"
    phases = os.environ.get("PHASES", "probe,save,resume").split(",")

    if "probe" in phases:
        store = CheckpointStore(local / "probe", log=lambda m: None)
        seen["probe"] = _try(store.prepare)
        store.close(restore=True)

    if "save" in phases:
        store = CheckpointStore(local / "save", log=lambda m: None)
        seen["save"] = _try(lambda: store.save(_state(1), 1, {"config_hash": "view"}))
        seen["save_left"] = sorted(p.name for p in (local / "save").rglob("*") if p.is_file())
        store.close()

    if "resume" in phases:
        shared = base / "shared"
        store = CheckpointStore(shared, keep_last=5, log=lambda m: None)
        for step in (1, 2):
            store.save(_state(step), step, {"config_hash": "view"})
        store.close()
        dist.barrier()
        if rank == 0:  # rank 1's node holds another copy, whose step 2 has other bytes (same size) in its shard
            shutil.copytree(shared, base / "node1" / "shared")
            shard = next((base / "node1" / "shared" / "step_00000002").glob("__1_*.distcp"))
            data = bytearray(shard.read_bytes())
            data[len(data) // 2] ^= 0xFF
            shard.write_bytes(bytes(data))
        dist.barrier()
        store = CheckpointStore(shared if rank == 0 else base / "node1" / "shared", log=lambda m: None)
        choice = store.newest_valid()
        seen["resume"] = {"step": choice.step, "skipped": choice.skipped}
        if choice.folder is not None:
            loaded = store.load(store.folder(choice.step), lambda keys: _state(0))  # this rank's path
            seen["loaded_shared"] = float(loaded["shared"][0])
        store.close()

    if "timing" in phases:
        shared = base / "timed"
        store = CheckpointStore(shared, log=lambda m: None)
        store.save(_state(1), 1, {"config_hash": "view"})
        times = []
        for _ in range(int(os.environ.get("REPEATS", "5"))):
            dist.barrier()
            t0 = time.perf_counter()
            store.newest_valid()
            times.append(time.perf_counter() - t0)
        seen["newest_valid_s"] = times
        store.close()

    (out / f"rank{rank}.json").write_text(json.dumps(seen))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
