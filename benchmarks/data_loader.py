"""stride's window loader against a plain torch Dataset + DataLoader, gather bandwidth, data wait in training.

1. Loader throughput (windows/s), side by side in one process, page cache warm: stride's
   `ShardedLoader` over a store (one `index_select` of whole rows per batch) against a
   `torch.utils.data.Dataset` whose `__getitem__` slices one window out of the same memory map,
   batched by a `DataLoader` (same batch size, shuffled, best of num_workers 0/1/2). Alternated
   `--repeats` times; medians. Headline `speedup_vs_torch_dataloader`.
2. Gather bandwidth: bytes of x a batch gather produces per second, over a plain numpy copy of the
   same number of bytes (one contiguous block of the same memory map). `gather_bw_fraction_of_copy`.
3. Data wait in the default workload: `configs/quickstart.toml` trained ~30 steps by stride.Trainer;
   `summary["step_time_breakdown_s"]["data"] / summary["step_time_s"]` (with prefetch on, and off).
4. `--rss-gb 0.5,2`: per dataset size, a fresh process opens a store of that size, runs an epoch's
   worth of batches (capped) and reports peak RSS, private (anonymous) RSS and file-backed RSS.

    python benchmarks/data_loader.py [--mb 256] [--repeats 3] [--rss-gb 0.5,2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from stride.data.loader import ShardedLoader
from stride.data.store import StoreWriter, open_store
from stride.data.windows import RowWindows

T0 = np.datetime64("2024-01-02T14:30", "ns").astype(np.int64)


def make_store(path: Path, mb: float, n_features: int = 32, n_symbols: int = 4, seed: int = 0) -> Path:
    """A store of about `mb` MiB: n_symbols x rows of float32 features, column 0 a positive price."""
    rows = int(mb * 2**20 / (4 * n_features) / n_symbols)
    w = StoreWriter(path, ["close", *[f"f{i}" for i in range(1, n_features)]])
    rng = np.random.default_rng(seed)
    chunk = 1 << 18
    for s in range(n_symbols):
        last = 100.0
        for a in range(0, rows, chunk):
            n = min(chunk, rows - a)
            v = rng.standard_normal((n, n_features), dtype=np.float32)
            v[:, 0] = last * np.exp(np.cumsum(1e-3 * v[:, 0]))
            last = float(v[-1, 0])
            w.append(f"S{s:02d}", T0 + (a + np.arange(n, dtype=np.int64)) * 60 * 10**9, v)
    return w.commit()


def stride_source(store_path: Path, seq_len: int, horizons: list[int]) -> RowWindows:
    st = open_store(store_path)
    starts, stops = st.segments()
    ranges = np.stack([starts + seq_len - 1, stops - max(horizons)], 1)
    return RowWindows(st.values, st.values[:, 0], ranges, seq_len, horizons)


class SliceDataset(torch.utils.data.Dataset):
    """The plain way: one window sliced out of the memory map per __getitem__."""

    def __init__(self, store_path: Path, seq_len: int, horizons: list[int]) -> None:
        self.path, self.seq_len, self.h = store_path, seq_len, np.array(horizons)
        m = open_store(store_path).manifest
        self.shape = tuple(m["files"]["values.bin"]["shape"])
        self.ends = np.concatenate([np.arange(r["start"] + seq_len - 1, r["stop"] - max(horizons))
                                    for r in m["symbols"]])
        self.mm: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.mm is None:  # opened lazily so each worker maps the file itself
            self.mm = np.memmap(self.path / "values.bin", np.float32, "r", shape=self.shape)
        e = int(self.ends[i])
        x = torch.from_numpy(np.array(self.mm[e - self.seq_len + 1 : e + 1]))
        p = np.log(self.mm[e + np.concatenate([[0], self.h]), 0].astype(np.float64))
        return x, torch.from_numpy((p[1:] - p[0]).astype(np.float32))


def time_windows(it_factory, n_batches: int, batch: int) -> float:  # noqa: ANN001
    """Windows per second over n_batches (after one warm-up batch)."""
    it = iter(it_factory())
    next(it)
    t0 = time.perf_counter()
    for _ in range(n_batches):
        next(it)
    dt = time.perf_counter() - t0
    del it
    return n_batches * batch / dt


def gather_vs_copy(src: RowWindows, batch: int, reps: int) -> dict[str, float]:
    """Bytes/s of the x gather (and of the whole gather with targets) against a numpy block copy.

    One torch thread, as numpy's copy has one: the same cores on both sides (and no spinning
    OpenMP team when other processes share the cores).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _gather_vs_copy(src, batch, reps)
    finally:
        torch.set_num_threads(threads)


def _gather_vs_copy(src: RowWindows, batch: int, reps: int) -> dict[str, float]:
    feats = src.features
    row_bytes = feats.shape[1] * 4
    g = torch.Generator().manual_seed(0)
    nbytes = batch * src.seq_len * row_bytes
    idx = [torch.randint(0, len(src), (batch,), generator=g) for _ in range(reps)]
    rows = [(src.end_rows(i).numpy()[:, None] + src._np_offsets).reshape(-1) for i in idx]  # noqa: SLF001
    block = batch * src.seq_len
    starts = torch.randint(0, feats.shape[0] - block, (reps,), generator=g).tolist()
    mm = feats.numpy()
    dst = np.empty((block, feats.shape[1]), np.float32)
    res: dict[str, list[float]] = {"copy": [], "gather_x": [], "gather_full": []}
    for k in range(reps):  # alternate, so noise hits all three alike
        t = time.perf_counter()
        np.copyto(dst, mm[starts[k] : starts[k] + block])
        res["copy"].append(nbytes / (time.perf_counter() - t))
        t = time.perf_counter()
        np.take(mm, rows[k], axis=0)  # (out= would be buffered: numpy copies it in mode="raise")
        res["gather_x"].append(nbytes / (time.perf_counter() - t))
        t = time.perf_counter()
        src.gather(idx[k])
        res["gather_full"].append(nbytes / (time.perf_counter() - t))
    return {k: statistics.median(v) for k, v in res.items()}


def data_wait(steps: int, prefetch: int) -> dict[str, float]:
    from stride.config import load_config
    from stride.train.trainer import Trainer

    cfg = load_config("configs/quickstart.toml", [f"train.steps={steps}", "train.val_every=0",
                                                   "metrics.progress=false", f"data.prefetch={prefetch}"])
    with tempfile.TemporaryDirectory() as d:
        s = Trainer(config=cfg, out=d).fit().summary
    return {"data_s": s["step_time_breakdown_s"]["data"], "step_s": s["step_time_s"],
            "fraction": s["step_time_breakdown_s"]["data"] / s["step_time_s"]}


def rss_child(store: str, seq_len: int, batch: int, max_batches: int) -> None:
    """Run in a fresh process: iterate the loader, print peak/anon/file RSS in MiB as JSON."""
    import resource

    src = stride_source(Path(store), seq_len, [1, 5, 20])
    ld = ShardedLoader(src, batch, prefetch=2)
    n = 0
    t0 = time.perf_counter()
    for _x, _y in ld:
        n += 1
        if n >= max_batches:
            break
    dt = time.perf_counter() - t0
    status = Path("/proc/self/status").read_text()
    kb = {ln.split(":")[0]: int(ln.split()[1]) for ln in status.splitlines() if ln.startswith(("Rss", "VmHWM"))}
    print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "rss_anon_mb": kb.get("RssAnon", 0) / 1024, "rss_file_mb": kb.get("RssFile", 0) / 1024,
                      "windows": len(src), "batches": n, "windows_per_s": n * batch / dt}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=256, help="dataset size for the throughput runs")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", type=int, default=40, help="timed batches per loader run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30, help="training steps for the data-wait figure")
    ap.add_argument("--rss-gb", default="", help="comma-separated store sizes in GiB for the RSS check")
    ap.add_argument("--rss-batches", type=int, default=2000)
    ap.add_argument("--workdir", default=None, help="where the temporary stores go (default: a temp dir)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--_rss-child", dest="rss_child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rss_child:
        rss_child(args.rss_child, args.seq_len, args.batch, args.rss_batches)
        return
    torch.set_num_threads(max(1, (os.cpu_count() or 2)))
    horizons = [1, 5, 20]
    work = Path(tempfile.mkdtemp(dir=args.workdir, prefix="stride-bench-data-"))
    out: dict[str, object] = {"dataset_mb": args.mb, "seq_len": args.seq_len, "batch": args.batch,
                              "threads": torch.get_num_threads()}
    try:
        store = make_store(work / "store", args.mb)
        src = stride_source(store, args.seq_len, horizons)
        ds = SliceDataset(store, args.seq_len, horizons)
        _ = src.gather(torch.arange(0, len(src), max(1, len(src) // 4096)))
        rates: dict[str, list[float]] = {"stride": [], "stride_1thread": [], "stride_prefetch": [],
                                         "torch_w0": [], "torch_w1": [], "torch_w2": []}
        nb = args.batches
        for _ in range(args.repeats):
            rates["stride"].append(time_windows(lambda: ShardedLoader(src, args.batch, prefetch=0), nb, args.batch))
            torch.set_num_threads(1)
            rates["stride_1thread"].append(
                time_windows(lambda: ShardedLoader(src, args.batch, prefetch=0), nb, args.batch))
            torch.set_num_threads(out["threads"])  # type: ignore[arg-type]
            rates["stride_prefetch"].append(
                time_windows(lambda: ShardedLoader(src, args.batch, prefetch=2), nb, args.batch))
            for w in (0, 1, 2):
                def make(w: int = w) -> torch.utils.data.DataLoader:
                    return torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=w,
                                                       persistent_workers=False)
                rates[f"torch_w{w}"].append(time_windows(make, max(4, nb // 4), args.batch))
        med = {k: statistics.median(v) for k, v in rates.items()}
        best_torch = max(med["torch_w0"], med["torch_w1"], med["torch_w2"])
        best_stride = max(med["stride"], med["stride_1thread"], med["stride_prefetch"])
        out["windows_per_s"] = {k: round(v) for k, v in med.items()}
        out["speedup_vs_torch_dataloader"] = best_stride / best_torch
        bw = gather_vs_copy(src, args.batch, max(10, 5 * args.repeats))
        out["bandwidth_GBps"] = {k: v / 1e9 for k, v in bw.items()}
        out["gather_bw_fraction_of_copy"] = bw["gather_full"] / bw["copy"]
        out["gather_x_bw_fraction_of_copy"] = bw["gather_x"] / bw["copy"]
        waits = {p: data_wait(args.steps, p) for p in (2, 0)}
        out["data_wait"] = {f"prefetch_{p}": v for p, v in waits.items()}
        out["data_wait_fraction_default_bench"] = waits[2]["fraction"]
        if args.rss_gb:
            rss = {}
            for gb in [float(g) for g in args.rss_gb.split(",")]:
                p = make_store(work / f"rss-{gb}", gb * 1024)
                r = subprocess.run([sys.executable, __file__, "--_rss-child", str(p), "--seq-len", str(args.seq_len),
                                    "--batch", str(args.batch), "--rss-batches", str(args.rss_batches)],
                                   capture_output=True, text=True, check=True)
                rss[f"{gb}GiB"] = json.loads(r.stdout.strip().splitlines()[-1])
                import shutil

                shutil.rmtree(p)
            out["rss"] = rss
            sizes = list(rss.values())
            out["rss_anon_growth_mb"] = sizes[-1]["rss_anon_mb"] - sizes[0]["rss_anon_mb"]
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    if not args.json:
        for k, v in out.items():
            print(f"{k}: {v}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
