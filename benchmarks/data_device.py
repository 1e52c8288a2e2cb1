"""Device-resident windows (`data.device_resident`): a batch gathered on the device, against that device's own
copy bandwidth (issue 20's goal: the gather at >= 0.5 of a device-to-device copy on an H200).

    .venv/bin/python benchmarks/data_device.py --device cuda --json      # on the GPU machine (benchmarks/gpu_check.sh)
    .venv/bin/python benchmarks/data_device.py --device cpu --mb 8        # the same code on the CPU: a smoke run

A store of `--mb` MiB (float32, 32 features; the common quant case of 64 assets x 250 days x 390 minutes
x 32 features is 800 MiB) goes to the device as `DeviceWindows` (the loader's device path). For each
batch size, medians over `--iters` timed batches after warm-up (benchmarks/kernels.py's `Timer`: CUDA
events on a GPU, the wall clock on the CPU), each on window ids of its own:
- `gather`: `DeviceWindows.gather`, the loader's path (ids to the device, then on CUDA one Triton kernel that
  looks up each window's first row and copies its T x F block and its targets);
- `gather_index_select`: the same with `impl="torch"`, the path without Triton (the first rows looked up, one
  `index_select` over the overlapping [M - T + 1, T, F] window view, the targets' rows), checked equal;
- `gather_rows`: the same batch as one `index_select` of the B*T rows of the contiguous [M, F] table
  (row ids = first rows + arange(T)): the other kernel the device path could use, timed so that a GPU run
  says which to keep; the script checks both give the same batch;
- `gather_ids_on_device`: `gather` on ids already on the device: the kernel alone, without the ids' copy
  (`ids_copy_share_of_gather` says what a copy of the ids a batch costs);
- `loader`: batches taken from the loader itself (`ShardedLoader` over the `DeviceWindows`), timed over blocks of
  64 batches (one block = one copy of 64 batches' ids to the device, `stage_ids`, then 64 gathers), per batch:
  the path a training run takes, and the goal's figure (`loader_fraction_of_copy_large`); `loader_index_select`
  the same with `impl="torch"`;
- `copy`: one contiguous device-to-device copy of the batch's bytes (`copy_` from a random offset of the
  rows into a buffer of its own); `copy_large`: one 256 MiB copy, the device's bandwidth.
Rates count bytes read + written (2 x the batch's bytes), as benchmarks/kernels.py does, so
`gather_fraction_of_copy_large` is the goal's figure and `gather_fraction_of_copy` the same-size one (a
4 MiB copy on an H200 takes a few microseconds, where launch cost weighs as much as bandwidth). On the CPU
smoke run a small store sits in cache while the 256 MiB copy does not, so its fractions can pass 1: they say
nothing there (the GPU's 800 MiB store is 16x its L2).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_loader import make_store, stride_source  # noqa: E402  (beside this file)
from kernels import Timer, copy_bandwidth_gbps  # noqa: E402  (the kernels table's timer and device copy)

from stride.data.device_windows import DeviceWindows  # noqa: E402
from stride.data.loader import IDS_CHUNK, ShardedLoader  # noqa: E402
from stride.data.probe import cpu_name  # noqa: E402

T = TypeVar("T")


def one_size(dev: DeviceWindows, b: int, timer: Timer, g: torch.Generator, copy_large_gbps: float,
             ) -> dict[str, object]:
    """The three batch timings at batch size b (module docstring), rates and fractions."""
    device, t, f = dev.device, dev.seq_len, dev.rows.shape[1]
    offs = torch.arange(t, device=device)
    flat_rows = dev.rows.reshape(-1)
    calls = timer.warmup + timer.reps  # each call of a timing on ids (or a block) of its own
    ids = [torch.randint(0, len(dev), (b,), generator=g) for _ in range(calls)]

    ids_on_device = [i.to(device) for i in ids]

    def rows_gather(k: int) -> tuple[torch.Tensor, torch.Tensor]:
        i = (ids[k].pin_memory() if device.type == "cuda" else ids[k]).to(device, non_blocking=True)  # as gather
        first = dev.starts.index_select(0, i)
        return dev.rows.index_select(0, (first[:, None] + offs).reshape(-1)).view(b, t, f), \
            dev.targets.index_select(0, i)

    impl = dev.impl

    def on_index_select(fn: Callable[[], T]) -> T:  # fn() with the device path's index_select kernel
        dev.impl = "torch"
        try:
            return fn()
        finally:
            dev.impl = impl

    def index_select_gather(k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return on_index_select(lambda: dev.gather(ids[k]))

    x0, y0 = dev.gather(ids[0])
    for name, (x1, y1) in (("row", rows_gather(0)), ("index_select", index_select_gather(0))):
        if not (torch.equal(x0, x1) and torch.equal(y0, y1)):
            raise SystemExit(f"data_device: the {name} gather and the loader's gather ({impl}) gave different batches")
    n_elems = b * t * f
    nbytes = n_elems * dev.rows.element_size()
    dst = torch.empty(n_elems, dtype=dev.rows.dtype, device=device)
    lo = torch.randint(0, max(1, flat_rows.numel() - n_elems), (calls,), generator=g).tolist()

    def each(fn: Callable[[int], object]) -> float:  # fn(k) on the k-th inputs, one k a call
        ks = iter(range(calls))
        return timer(lambda: fn(next(ks)))

    loader = ShardedLoader(dev, b, seed=int(torch.randint(0, 2**31, (1,), generator=g)))

    def batches() -> Iterator[object]:  # epoch after epoch, as a long run takes them
        while True:
            yield from loader

    it = batches()

    def block() -> None:
        for _ in range(IDS_CHUNK):
            next(it)

    ms = {"loader": timer(block) / IDS_CHUNK, "loader_index_select": timer(lambda: on_index_select(block)) / IDS_CHUNK,
          "gather": each(lambda k: dev.gather(ids[k])), "gather_index_select": each(index_select_gather),
          "gather_rows": each(rows_gather),
          "gather_ids_on_device": each(lambda k: dev.gather(ids_on_device[k])),
          "copy": each(lambda k: dst.copy_(flat_rows[lo[k] : lo[k] + n_elems]))}
    rate = {k: 2 * nbytes / (v * 1e-3) / 1e9 for k, v in ms.items()}
    return {"batch_bytes": nbytes, "impl": impl, "ms": ms, "GBps": rate,
            "gather_fraction_of_copy": rate["gather"] / rate["copy"],
            "loader_fraction_of_copy_large": rate["loader"] / copy_large_gbps,
            "loader_index_select_fraction_of_copy_large": rate["loader_index_select"] / copy_large_gbps,
            "gather_fraction_of_copy_large": rate["gather"] / copy_large_gbps,
            "gather_index_select_fraction_of_copy_large": rate["gather_index_select"] / copy_large_gbps,
            "gather_rows_fraction_of_copy_large": rate["gather_rows"] / copy_large_gbps,
            "index_select_over_gather": ms["gather_index_select"] / ms["gather"],
            "gather_rows_over_gather": ms["gather"] / ms["gather_rows"],
            "ids_copy_share_of_gather": 1.0 - ms["gather_ids_on_device"] / ms["gather"]}


def measure(dev: DeviceWindows, batches: list[int], iters: int, seed: int = 0) -> dict[str, object]:
    """The device's 256 MiB copy (benchmarks/kernels.py's, as its table divides by), then `one_size` at each
    batch size."""
    timer = Timer(dev.device.type == "cuda", iters, 3)
    copy_large = copy_bandwidth_gbps(timer, str(dev.device), 256)
    g = torch.Generator().manual_seed(seed)
    return {"copy_large_GBps": copy_large,
            "by_batch": {str(b): one_size(dev, b, timer, g, copy_large) for b in batches}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--mb", type=float, default=256, help="store size (float32); 800 is the issue's quant case")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batches", default="256,4096", help="comma-separated batch sizes")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("data_device: --device cuda but torch sees no CUDA device")
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="stride-bench-device-") as work:
        t0 = time.perf_counter()
        store = make_store(Path(work) / "store", args.mb)
        src = stride_source(store, args.seq_len, [1, 5, 20])
        made = time.perf_counter() - t0
        t0 = time.perf_counter()
        dev = DeviceWindows(src, device)
        to_device = time.perf_counter() - t0
        res = measure(dev, [int(b) for b in args.batches.split(",") if b], args.iters)
    out = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
           "device_type": device.type, "dataset_mb": args.mb, "seq_len": args.seq_len,
           "windows": len(dev), "store_s": made, "to_device_s": to_device, **res}
    if args.json:
        print(json.dumps(out))
        return
    print(f"{out['device']}: {len(dev)} windows of {args.seq_len} x 32 float32; device copy, 256 MiB: "
          f"{res['copy_large_GBps']:.0f} GB/s (read + write)")
    for b, r in res["by_batch"].items():  # type: ignore[union-attr]
        print(f"  batch {b:>5}: loader {r['ms']['loader']:.3f} ms a batch ({r['loader_fraction_of_copy_large']:.2f} "
              f"of the device copy); gather {r['ms']['gather']:.3f} ms ({r['GBps']['gather']:.0f} GB/s, "
              f"{r['gather_fraction_of_copy_large']:.2f} of the device copy, {r['gather_fraction_of_copy']:.2f} of "
              f"a copy of its bytes; {r['impl']}); index_select {r['ms']['gather_index_select']:.3f} ms "
              f"({r['gather_index_select_fraction_of_copy_large']:.2f}); row gather {r['ms']['gather_rows']:.3f} ms "
              f"({r['gather_rows_fraction_of_copy_large']:.2f})")


if __name__ == "__main__":
    main()
