"""One rank of the failed-save test: saves where only rank 1 fails; every rank reports what it saw.

Run with RANK / WORLD_SIZE=2 / MASTER_ADDR / MASTER_PORT set. Usage: python ckpt_fail_worker.py CKPT_DIR OUT_DIR
Step 1 saves cleanly; step 2 (sync) fails in rank 1's shard write (DCP's own write, the disk "full");
step 3 (async, staging copy in the background) fails after DCP, in rank 1's checksumming (an I/O error
reading its shard back);
step 4 saves cleanly again (the ranks still agree on every collective after two failures).
"""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.filesystem import FileSystem

import stride.checkpoint.store as store_mod
from stride.checkpoint import CheckpointError
from stride.checkpoint.store import CheckpointStore

FAIL = {"step": 0}
real_create_stream = FileSystem.create_stream
real_describe_files = store_mod.describe_files


def failing_create_stream(self, path, mode):
    if FAIL["step"] == 2:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    return real_create_stream(self, path, mode)


def failing_describe_files(folder, paths):
    if FAIL["step"] == 3:
        raise OSError(errno.EIO, "Input/output error", str(paths[0]) if paths else str(folder))
    return real_describe_files(folder, paths)


def main() -> None:
    ckpt, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 1:
        FileSystem.create_stream = failing_create_stream
        store_mod.describe_files = failing_describe_files
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    store = CheckpointStore(ckpt, keep_last=5, log=lambda m: None)
    seen: dict[str, str | None] = {}
    for step, asynchronous in ((1, False), (2, False), (3, True), (4, False)):
        FAIL["step"] = step
        try:
            store.save({"model": model.state_dict()}, step, {"config_hash": "fail"}, asynchronous=asynchronous,
                       stage_in_background=asynchronous)
            store.fence()
            store.wait()
            seen[str(step)] = None
        except CheckpointError as exc:
            seen[str(step)] = str(exc)
        with torch.no_grad():
            model.weight.add_(1.0)
    store.close()
    (out_dir / f"rank{rank}.json").write_text(json.dumps({"errors": seen, "saved": store.saved_steps}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
