"""Checkpoint benchmark: sync save, async stall, write bandwidth against a plain file write, load.

A model of a few hundred MB (an MLP, fp32) with AdamW state (so the checkpoint is ~3x the params)
is saved through stride's CheckpointStore, the path training uses: DCP shards, SHA-256 manifest,
atomic rename. The reference is one sequential `write` + `fsync` of the same number of bytes on
the same disk. `--json` prints the headline figures as the last line.

    .venv/bin/python benchmarks/checkpoint.py --mb 400 --repeats 3 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict

from stride.checkpoint.store import CheckpointStore


def build(total_mb: float, width: int = 2048) -> tuple[nn.Module, torch.optim.Optimizer]:
    """An MLP whose params + AdamW state come to about `total_mb` MB."""
    n_params = int(total_mb * 1e6 / 4 / 3)
    layers = max(1, n_params // (width * width + width))
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(4, width)).square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return model, opt


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def plain_write_s(path: Path, n_bytes: int) -> float:
    buf = os.urandom(1 << 20) * 64  # 64 MiB chunks
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        left = n_bytes
        while left > 0:
            k = min(left, len(buf))
            f.write(memoryview(buf)[:k])
            left -= k
        f.flush()
        os.fsync(f.fileno())
    dt = time.perf_counter() - t0
    path.unlink()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=400, help="params + optimizer state, MB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir on /tmp's disk)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(0)
    model, opt = build(args.mb)
    root = Path(tempfile.mkdtemp(prefix="stride-ckpt-bench-", dir=args.dir))
    store = CheckpointStore(root, keep_last=1, log=lambda m: None)
    meta = {"config_hash": "bench"}
    sync_s, stall_s, async_total_s, load_s, plain_s, dcp_s, commit_s = [], [], [], [], [], [], []
    step = 0
    try:
        # The first async save allocates the stager's CPU buffers (once per run): timed on its own.
        step += 1
        model_sd, optim_sd = get_state_dict(model, opt)
        first_stall = store.save({"model": model_sd, "optim": optim_sd}, step, meta, asynchronous=True)
        store.wait()
        for _ in range(args.repeats):
            step += 1
            model_sd, optim_sd = get_state_dict(model, opt)
            sync_s.append(store.save({"model": model_sd, "optim": optim_sd}, step, meta))
            dcp_s.append(store.last_phases["dcp_s"])
            commit_s.append(store.last_phases["commit_s"])
            n_bytes = folder_bytes(store.folder(step))
            plain_s.append(plain_write_s(root / "plain.bin", n_bytes))

            step += 1
            t0 = time.perf_counter()
            model_sd, optim_sd = get_state_dict(model, opt)
            stall_s.append(store.save({"model": model_sd, "optim": optim_sd}, step, meta, asynchronous=True))
            store.wait()
            async_total_s.append(time.perf_counter() - t0)

            t0 = time.perf_counter()
            store.load(store.folder(step), lambda keys: dict(zip(("model", "optim"), get_state_dict(model, opt),
                                                                 strict=True)))
            load_s.append(time.perf_counter() - t0)
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)

    med = statistics.median
    out = {
        "checkpoint_bytes": n_bytes,
        "params": sum(p.numel() for p in model.parameters()),
        "sync_save_s": med(sync_s),
        "async_stall_s": med(stall_s),
        "async_total_s": med(async_total_s),
        "async_first_stall_s": first_stall,
        "async_stall_fraction": med(stall_s) / med(sync_s),
        "plain_write_s": med(plain_s),
        "write_bw_fraction": med(plain_s) / med(sync_s),  # (bytes / sync save) / (bytes / plain write)
        "dcp_write_s": med(dcp_s),
        "manifest_commit_s": med(commit_s),  # SHA-256 of every file, manifest, rename
        "dcp_write_bw_fraction": med(plain_s) / med(dcp_s),  # the DCP write alone, without checksums
        "save_gb_per_s": n_bytes / med(sync_s) / 1e9,
        "plain_gb_per_s": n_bytes / med(plain_s) / 1e9,
        "load_s": med(load_s),
        "repeats": args.repeats,
    }
    if not args.json:
        for k, v in out.items():
            print(f"{k:>22}: {v:.4g}" if isinstance(v, float) else f"{k:>22}: {v}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
