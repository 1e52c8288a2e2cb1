"""Checkpoint benchmark: sync save, async stall, write bandwidth against a plain file write, load.

A model of a few hundred MB (an MLP, fp32) with AdamW state (so the checkpoint is ~3x the params)
is saved through stride's CheckpointStore, the path training uses: DCP shards, per-rank XXH3-128
checksums, manifest, atomic rename. The reference is one sequential `write` + `fsync` of the same
number of bytes on the same disk. The async stall is split into its parts (waiting for the previous
save, clearing the temporary folder, the staging copy, launching the background write). Both staging
modes are measured with a real training step after the save: "loop" (the copy blocks the loop) and
"background" (the copy runs in a thread until the optimizer step), each as its stall and as save + next
step end to end, which shows what the overlapped copy costs the step. The headline `async_stall_s` is
the mode `checkpoint.staging = "auto"` picks for this process (background when a core is free for the
copy, as with the default `--threads 1` on 2 cores; loop when torch's threads take every core).
`--variants` also times, alternated with the default, a sync save with torch.save's zip CRC32 left
on, and the throughput of each checksum candidate over the checkpoint's own files (page cache warm).
`--json` prints the headline figures as the last line.

    .venv/bin/python benchmarks/checkpoint.py --mb 400 --repeats 5 --json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict

import stride.checkpoint.store as store_mod
from stride.checkpoint.callback import choose_staging
from stride.checkpoint.store import CheckpointStore


def build(total_mb: float, width: int = 2048, device: str = "cpu") -> tuple[nn.Module, torch.optim.Optimizer]:
    """An MLP whose params + AdamW state come to about `total_mb` MB."""
    n_params = int(total_mb * 1e6 / 4 / 3)
    layers = max(1, n_params // (width * width + width))
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(4, width, device=device)).square().mean().backward()
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


def checksum_gb_per_s(folder: Path, repeats: int = 3) -> dict[str, float]:
    """One thread, the checkpoint's own bytes (read into memory first): each candidate's throughput."""
    import xxhash

    class Crc32:
        def __init__(self) -> None:
            self.v = 0

        def update(self, b: bytes) -> None:
            self.v = zlib.crc32(b, self.v)

    makers: dict[str, Any] = {"xxh3_128": xxhash.xxh3_128, "xxh3_64": xxhash.xxh3_64, "crc32 (zlib)": Crc32,
                              "sha256": hashlib.sha256, "blake2b": hashlib.blake2b}
    try:
        import google_crc32c

        makers["crc32c (google-crc32c)"] = google_crc32c.Checksum
    except ImportError:
        pass
    blobs = [p.read_bytes() for p in folder.iterdir() if p.is_file()]
    total = sum(len(b) for b in blobs)
    times: dict[str, list[float]] = {k: [] for k in makers}
    for _ in range(repeats):
        for name, make in makers.items():  # alternated, so a load change hits every candidate alike
            t0 = time.perf_counter()
            for b in blobs:
                make().update(b)
            times[name].append(time.perf_counter() - t0)
    return {k: total / statistics.median(v) / 1e9 for k, v in times.items()}


def with_zip_crc(folder: Path, thread_count: int) -> Any:
    """DCP's stock writer: torch.save computes its zip CRC32 (the variant stride turned off)."""
    from torch.distributed.checkpoint import FileSystemWriter

    return FileSystemWriter(folder, sync_files=True, thread_count=thread_count)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, fence: Any = None) -> float:
    """One forward/backward/AdamW step; `fence` (if given) runs before the optimizer step, as in the trainer.

    Returns the seconds spent in `fence` (the part of the step that waited for the staging copy)."""
    model(x).square().mean().backward()
    waited = fence() if fence is not None else 0.0
    opt.step()
    opt.zero_grad(set_to_none=True)
    if x.is_cuda:
        torch.cuda.synchronize()  # the step's time is the device's, not the launch's
    return waited


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=400, help="params + optimizer state, MB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64, help="samples in the training step an async save overlaps")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: one rank per core, as stride trains)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir on /tmp's disk)")
    ap.add_argument("--variants", action="store_true", help="also: zip CRC32 on, and checksum candidates")
    ap.add_argument("--device", default="cpu", help="where the model lives: cpu, or cuda (staging is then a "
                    "device-to-host copy; benchmarks/gpu_check.sh runs it)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, opt = build(args.mb, device=args.device)
    x = torch.randn(args.batch, model[0].in_features, device=args.device)
    root = Path(tempfile.mkdtemp(prefix="stride-ckpt-bench-", dir=args.dir))
    store = CheckpointStore(root, keep_last=1, log=lambda m: None)
    meta = {"config_hash": "bench"}
    m: dict[str, list[float]] = {}  # every measured series, medians reported

    def add(key: str, value: float) -> None:
        m.setdefault(key, []).append(value)

    def state() -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(model, opt)
        return {"model": model_sd, "optim": optim_sd}

    step = 0
    try:
        # The first async save of each mode allocates the stager's CPU buffers (once per run): timed apart.
        for background in (False, True):
            step += 1
            add("first_stall_s", store.save(state(), step, meta, asynchronous=True, stage_in_background=background))
            store.wait()
        train_step(model, opt, x)  # warm-up
        for _ in range(args.repeats):
            # Sync save (the whole write, checksums, vote, manifest, rename), then a plain write of the same bytes.
            step += 1
            add("sync_save_s", store.save(state(), step, meta))
            add("dcp_write_s", store.last_phases["dcp_s"])
            add("manifest_commit_s", store.last_phases["commit_s"])
            add("checksum_s", store.last_phases["checksum_s"])
            n_bytes = folder_bytes(store.folder(step))
            store.wait()  # retention of the previous checkpoint, in the background
            add("plain_write_s", plain_write_s(root / "plain.bin", n_bytes))

            # A training step alone: the reference for the slowdown an overlapped save causes.
            t0 = time.perf_counter()
            train_step(model, opt, x)
            add("train_step_s", time.perf_counter() - t0)

            # Async save with the staging copy in the step loop (checkpoint.staging = "loop", what "auto"
            # picks on CPU), then a step (the write runs in the background during it).
            step += 1
            t0 = time.perf_counter()
            add("stall_loop_s", store.save(state(), step, meta, asynchronous=True))
            for k, v in store.last_stall_parts.items():
                add(f"stall_parts_loop.{k}", v)
            train_step(model, opt, x)
            add("save_and_step_loop_s", time.perf_counter() - t0)
            store.wait()
            add("async_total_s", time.perf_counter() - t0)

            # Async save, staging copy in a thread until the next optimizer step (staging = "background").
            step += 1
            t0 = time.perf_counter()
            launch = store.save(state(), step, meta, asynchronous=True, stage_in_background=True)
            for k, v in store.last_stall_parts.items():
                add(f"stall_parts_background.{k}", v)
            fence_wait = train_step(model, opt, x, fence=store.fence)
            add("save_and_step_background_s", time.perf_counter() - t0)
            add("stall_background_s", launch + fence_wait)
            add("stall_parts_background.fence_wait_s", fence_wait)
            store.wait()
            add("stage_copy_background_s", store.last_phases["stage_copy_s"])

            t0 = time.perf_counter()
            store.load(store.folder(step), lambda keys: state())
            add("load_s", time.perf_counter() - t0)

            if args.variants:
                step += 1
                default_writer, store_mod.shard_writer = store_mod.shard_writer, with_zip_crc
                try:
                    add("sync_save_zip_crc_on_s", store.save(state(), step, meta))
                finally:
                    store_mod.shard_writer = default_writer
                store.wait()
        checksums = checksum_gb_per_s(store.folder(step)) if args.variants else None
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in m.items()}
    auto_mode, _ = choose_staging("auto", torch.device(args.device), [])

    def parts_of(prefix: str) -> dict[str, float]:
        return {k.removeprefix(prefix): v for k, v in med.items() if k.startswith(prefix)}

    out = {
        "checkpoint_bytes": n_bytes,
        "params": sum(p.numel() for p in model.parameters()),
        "sync_save_s": med["sync_save_s"],
        # Headline: the mode `checkpoint.staging = "auto"` picks for this process on this machine (background
        # where a core is free for the copy: here --threads 1 on 2 cores). Both modes are reported beside it.
        "async_staging": auto_mode,
        "async_stall_s": med[f"stall_{auto_mode}_s"],
        "async_stall_fraction": med[f"stall_{auto_mode}_s"] / med["sync_save_s"],
        "async_stall_loop_s": med["stall_loop_s"],
        "async_stall_loop_fraction": med["stall_loop_s"] / med["sync_save_s"],
        "async_stall_loop_parts_s": parts_of("stall_parts_loop."),  # wait_previous, prepare, stage_copy, launch
        "async_stall_background_s": med["stall_background_s"],  # launch + the wait before the optimizer step
        "async_stall_background_fraction": med["stall_background_s"] / med["sync_save_s"],
        "async_stall_background_parts_s": parts_of("stall_parts_background."),
        "stage_copy_background_s": med["stage_copy_background_s"],  # the copy's duration in its thread
        # A save plus the step after it, end to end: the copy and the write slow a step they overlap, so the
        # stall alone flatters; these compare the two staging modes (and a step without a save) honestly.
        "train_step_s": med["train_step_s"],
        "save_and_step_loop_s": med["save_and_step_loop_s"],
        "save_and_step_background_s": med["save_and_step_background_s"],
        "async_total_s": med["async_total_s"],
        "async_first_stall_s": m["first_stall_s"],  # [loop, background]: allocates the stager's buffers
        "plain_write_s": med["plain_write_s"],
        "write_bw_fraction": med["plain_write_s"] / med["sync_save_s"],  # (bytes/sync save) / (bytes/plain write)
        "dcp_write_s": med["dcp_write_s"],
        "manifest_commit_s": med["manifest_commit_s"],  # XXH3-128 of every file, outcome vote, manifest, rename
        "checksum_s": med["checksum_s"],
        "dcp_write_bw_fraction": med["plain_write_s"] / med["dcp_write_s"],  # the DCP write alone
        "save_gb_per_s": n_bytes / med["sync_save_s"] / 1e9,
        "plain_gb_per_s": n_bytes / med["plain_write_s"] / 1e9,
        "load_s": med["load_s"],
        "repeats": args.repeats,
        "batch": args.batch,
        "torch_threads": torch.get_num_threads(),
        "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(),
        "load_average": os.getloadavg(),
    }
    if args.variants:
        out["sync_save_zip_crc_on_s"] = med["sync_save_zip_crc_on_s"]
        out["checksum_gb_per_s"] = checksums
    if not args.json:
        for k, v in out.items():
            print(f"{k:>28}: {v:.4g}" if isinstance(v, float) else f"{k:>28}: {v}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
