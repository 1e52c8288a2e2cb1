"""stride's window loader against a plain torch Dataset + DataLoader, gather bandwidth, data wait in training.

1. Loader throughput (windows/s), side by side in one process, page cache warm, for float32 and for
   bfloat16 features (a bf16 store of the same content, rounded; targets from the float32 store's
   price column in both, as `data.batch_dtype = "bfloat16"` trains): stride's `ShardedLoader` over a
   `RowWindows` source (one gather of whole windows per batch, `stride.data.gather`) against a
   `torch.utils.data.Dataset` whose `__getitem__` slices one window out of the same memory map
   (`torch.from_numpy` of the slice: no extra copy) and computes its targets from the same price
   column, batched by a `DataLoader` (same batch size, shuffled, default collate, pin_memory off,
   persistent workers, best of num_workers 0/1/2). Both hand out the same (x, y) tensors (checked
   first). Alternated `--repeats` times; medians. Headline `speedup_vs_torch_dataloader`: float32
   (the store's default dtype); `_bf16` the same with bf16 features (half the bytes: a precision
   trade, not a loader gain). `_cpu`: windows per CPU-second of the process (stride against the
   in-process DataLoader, num_workers=0), steadier on a shared machine. `stride_gather{k}`: the same
   loader with `data.gather_threads = k` (each batch split over k threads), for every k of 2, 4, 8 up
   to this host's cores; `best_stride_loader` names the fastest stride row.
   `stride_auto`: the loader as a run gets it (the plan of a fresh `stride.data.probe` measurement:
   copy variant, gather threads, prefetch; `probe_plan` in the JSON); `fraction_of_copy_bound_cpu`
   = its windows per CPU-second / the copy-bound ceiling (goal >= 0.9), each round against the ceiling
   taken in that round among the loader runs (`ceiling_now`, `copy_ceiling_GBps_by_round`), the median;
   `_table_ceiling`: against the gather table's ceiling (part 2), timed after every loader run;
   `fraction_of_stream_copy_cpu`: against the window kernel's own contiguous copy (streaming stores;
   `stream_ceiling_now`, `stream_copy_ceiling_GBps_by_round`), in case the kernel's copy beats the plain
   one (`stream_copy_over_plain_copy`: 1.01 on the Intel Xeon host, level); `prefetch_over_no_prefetch_cpu`.
2. Gather bandwidth (`gather_vs_copy`, float32): every way of gathering a batch that was tried, side
   by side, and plain copies of the same bytes on 1 and 2 threads, each way into a destination of its
   own. `gather_bw_fraction_of_copy` = the loader's whole gather over a numpy copy; `_hot_dst`: both
   into a destination each wrote just before (a loader's steady state; `_hot_dst_huge`: the copy into
   2 MiB pages, as the loader's batch buffers are), `_cold_dst`: both into outputs outside the
   cache; `copy_bound_*`: windows/s if every byte moved at the fastest copy rate measured (the
   ceiling of any loader that materialises windows), per dtype. Beside them, what random windows
   allow: `block_copy_fraction_of_copy` (the batch's own blocks, one memcpy each),
   `gather_bw_fraction_of_block_copy`, `windows_lines_over_heads_only` (the kernel's interleaved
   page streams against page-head hints alone), `windows_lines_over_lines4` (its 12 streams against 4)
   and `normalised_gather_over_gather` (the default float32 config, train normalisation in the copy).
3. Sequential evaluation (float32): every window of the store in time order through
   `ShardedLoader(shuffle=False)` (one window gather a batch), `SequentialWindows` (one slab of n+T-1
   rows a batch, windows as an overlapping `unfold` view) and the plain `DataLoader(shuffle=False)`.
4. Data wait in the default workload: `configs/quickstart.toml` trained ~30 steps by stride.Trainer;
   `summary["step_time_breakdown_s"]["data"] / summary["step_time_s"]` (with prefetch on, and off).
5. `--rss-gb 1,10`: per store size, fresh processes open a store of that size dropped from the page
   cache (cold) and run `--rss-batches` batches with prefetch, in three modes: `plain` (no page
   hints: the previous loader, 300 batches at most), `hints` (MADV_RANDOM + read-ahead of the next
   batches while faults hit the disk: the default) and `hints_resident256` (`data.resident_mb=256`:
   pages unmapped past 256 MiB). Each reports windows/s, peak / anonymous / file-backed RSS, CPU
   seconds, major faults and MiB read from disk. The stores are deleted afterwards.

    .venv/bin/python benchmarks/data_loader.py [--mb 256] [--repeats 5] [--rss-gb 1,10] [--gather-only] [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch

from stride.data.loader import ShardedLoader
from stride.data.probe import cpu_name, plan_loader
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


def bf16_copy(src: Path, dst: Path) -> Path:
    """The same store with bfloat16 values (rounded to nearest even), symbol by symbol."""
    st = open_store(src)
    w = StoreWriter(dst, st.columns, dtype="bfloat16")
    for r in st.manifest["symbols"]:
        for a in range(r["start"], r["stop"], 1 << 18):
            b = min(r["stop"], a + (1 << 18))
            w.append(r["symbol"], np.asarray(st.timestamps[a:b]), st.values[a:b].numpy())
    return w.commit()


def stride_source(store_path: Path, seq_len: int, horizons: list[int], hints: bool = True,
                  resident_mb: float = 0, features: Path | None = None, gather_threads: int = 1) -> RowWindows:
    """The loader's source over a store, as `build_store_sources` makes it (page hints on unless `hints=False`).

    `features`: another store (the bf16 copy) whose rows are the windows; targets stay on `store_path`'s
    column 0, and x keeps the features' dtype (bf16 batches, as `data.batch_dtype = "bfloat16"`).
    """
    st = open_store(store_path)
    fs = open_store(features) if features is not None else st
    starts, stops = st.segments()
    ranges = np.stack([starts + seq_len - 1, stops - max(horizons)], 1)
    fm, pm = (fs.values_map, st.values_map) if hints else (None, None)
    return RowWindows(fs.values, st.values[:, 0], ranges, seq_len, horizons, feature_map=fm, price_map=pm,
                      resident_mb=resident_mb, batch_dtype=fs.values.dtype, gather_threads=gather_threads)


class SliceDataset(torch.utils.data.Dataset):
    """The plain way, as good as it gets: one window sliced out of the memory map per __getitem__.

    `torch.from_numpy` of the slice (a view: the default collate's stack is the one copy), targets
    from the price column with `math.log` on Python floats (the fastest per-item form measured: 5%
    ahead of a numpy fancy index + log). Memory maps opened lazily so each worker maps the files itself.
    `previous=True`: the form this benchmark used before (`np.array` copy of the slice, then the
    collate's copy; numpy targets), kept to show in the same run what the fairer form changed.
    """

    def __init__(self, store_path: Path, seq_len: int, horizons: list[int], features: Path | None = None,
                 previous: bool = False) -> None:
        self.path, self.fpath, self.seq_len, self.h = store_path, features or store_path, seq_len, list(horizons)
        self.previous = previous
        m = open_store(store_path).manifest
        self.shape = tuple(m["files"]["values.bin"]["shape"])
        fm = open_store(self.fpath).manifest
        self.bf16, self.fshape = fm["dtype"] == "bfloat16", tuple(fm["files"]["values.bin"]["shape"])
        self.ends = np.concatenate([np.arange(r["start"] + seq_len - 1, r["stop"] - max(horizons))
                                    for r in m["symbols"]])
        self.fm: np.ndarray | None = None
        self.pm: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.fm is None:  # mode "c": writable for torch.from_numpy, never written back
            self.pm = np.memmap(self.path / "values.bin", np.float32, "c", shape=self.shape)
            self.fm = np.memmap(self.fpath / "values.bin", np.uint16 if self.bf16 else np.float32, "c",
                                shape=self.fshape)
        e = int(self.ends[i])
        if self.previous:
            x = torch.from_numpy(np.array(self.fm[e - self.seq_len + 1 : e + 1]))
            p = np.log(self.pm[e + np.array([0, *self.h]), 0].astype(np.float64))
            return x, torch.from_numpy((p[1:] - p[0]).astype(np.float32))
        x = torch.from_numpy(self.fm[e - self.seq_len + 1 : e + 1])
        if self.bf16:
            x = x.view(torch.bfloat16)
        p0 = math.log(self.pm[e, 0])
        return x, torch.tensor([math.log(self.pm[e + h, 0]) - p0 for h in self.h], dtype=torch.float32)


def time_windows(it_factory, n_batches: int, batch: int) -> tuple[float, float]:  # noqa: ANN001
    """(windows per second, windows per CPU-second of this process) over n_batches, after a warm-up batch.

    The CPU figure counts every thread of this process (prefetch included) and none of a DataLoader's
    worker processes, so it is only compared for in-process loaders; on a shared machine it is the
    steadier of the two (wall time also counts the time other processes hold the cores).
    """
    it = iter(it_factory())
    next(it)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n_batches):
        next(it)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    del it
    return n_batches * batch / dt, n_batches * batch / max(dc, 1e-9)


def gather_vs_copy(src: RowWindows, batch: int, reps: int) -> dict[str, float]:
    """Bytes/s of each way to gather a batch of windows, and of plain copies of the same bytes.

    Every repetition runs the ways in a shuffled order, each on windows (or a block) of its own, so
    neither noise nor a warm cache favours one; medians. Gathers: `windows` (the loader's
    `WindowGather`, the C kernel with its defaults, window copy only), `windows_gil` (the same; the numpy fallback
    once kept the GIL here), `windows_sorted` (starts
    sorted first, for locality), `rows_take_fresh` (one `numpy.take` of B*T rows: the previous
    loader), `rows_take_reused` (into a reused buffer), `torch_windows_fresh` / `_reused` (torch
    `index_select` of window starts over a strided window view, one OpenMP thread),
    `torch_windows_reused_2threads` (each half of the batch on its own thread), `gather_full` (the
    loader's whole `gather`: ids to (x, y), targets included), `gather_full_normalised` (the same with the
    train normalisation of the default float32 config done in the copy). Copies of one contiguous block of the
    same bytes: `copy_numpy` (`np.copyto` into a reused buffer), `copy_memcpy` (libc `memmove`),
    `copy_memcpy_2threads` (two halves on two threads). `block_copy`: the batch's own random windows,
    one memcpy each (the C kernel without hints: what any window loader must move, from where it
    lies), and `blocks_{4,16,64,256}k`: 4 MiB as random blocks of that size (one memcpy each), the
    per-block cost that no copy routine removes (see docs/data.md). `_cold_dst`: the whole gather and
    the numpy copy each into a new output while the last 16 outputs stay alive, so the destination is
    not in cache (64 MiB > L3), as in training, where the model's step passes between two batches; the
    other ways write into a reused buffer (or their gather's recycled one), which flatters the
    contiguous copy most.
    """
    import ctypes
    from concurrent.futures import ThreadPoolExecutor

    from stride.data.gather import WindowGather, large_buffer

    feats = src.features
    t, f = src.seq_len, feats.shape[1]
    nbytes = batch * t * f * feats.element_size()
    g = torch.Generator().manual_seed(0)
    n_ways = 26
    idx = [torch.randint(0, len(src), (batch,), generator=g) for _ in range(reps * n_ways)]
    starts = [src.end_rows(i).numpy() - (t - 1) for i in idx]
    block = batch * t
    blocks = torch.randint(0, feats.shape[0] - block, (reps * n_ways,), generator=g).tolist()
    mm = feats.numpy()
    # every way writes into a destination of its own (reused): a way sharing one with others found it in
    # cache more often (the numpy copy shared one with 5 other ways, the gather had its own: 0.50 against
    # 0.6-0.7 with its own, AMD EPYC), which favoured the copy
    dsts: dict[str, np.ndarray] = {}

    def dst(way: str) -> np.ndarray:
        if way not in dsts:  # `_huge`: in 2 MiB pages, as the loader's batch buffers (gather.large_buffer)
            dsts[way] = (large_buffer(nbytes).view(mm.dtype).reshape(block, f) if way.endswith("_huge")
                         else np.empty((block, f), mm.dtype))
        return dsts[way]
    win = feats.as_strided((feats.shape[0] - t + 1, t, f), (f, f, 1))
    gw, gw_sorted, gw_lines = WindowGather(feats, t), WindowGather(feats, t), WindowGather(feats, t, lines=True)
    gw_heads = WindowGather(feats, t, ahead=4, lines=False)  # the previous kernel: page heads only
    gw_lines4 = WindowGather(feats, t, lines=4)  # 4 page streams (glibc's large memcpy), not the kernel's 12
    gw_gil = WindowGather(feats, t)
    gw_gil._blocks = lambda b: 1  # type: ignore[method-assign]  # one block a window: numpy keeps the GIL
    offs = np.arange(t)
    ex = ThreadPoolExecutor(1)
    gw_block = WindowGather(feats, t, ahead=0, stream=False, lines=False)  # one memcpy a window, no hints
    row_bytes = f * feats.element_size()
    sized = {kb: WindowGather(feats, kb * 1024 // row_bytes, ahead=0, stream=False, lines=False)
             for kb in (4, 16, 64, 256)}

    rng_b = np.random.default_rng(1)
    block_starts = {kb: [rng_b.integers(0, feats.shape[0] - kb * 1024 // row_bytes, nbytes // (kb * 1024))
                         for _ in range(reps * n_ways)] for kb in sized}

    def random_blocks(kb: int, k: int) -> None:
        sized[kb](block_starts[kb][k])

    alive: dict[str, deque] = {"gather": deque(maxlen=16), "copy": deque(maxlen=16)}
    cold_src = copy.copy(src)  # its own gather, so its own recycled batch buffers (cold ones stay there)
    cold_src._gather = WindowGather(feats, t, ahead=src._gather.ahead, stream=src._gather.stream,
                                    lines=src._gather.lines)
    norm_src = copy.copy(src)  # the default float32 config's batches: train normalisation in the copy
    norm_src._gather = WindowGather(feats, t, ahead=src._gather.ahead, stream=src._gather.stream,
                                    lines=src._gather.lines)
    sample = feats[:: max(1, feats.shape[0] // 4096)].double()
    norm_src.shift, norm_src.scale = sample.mean(0).float(), (1 / sample.std(0).clamp_min(1e-12)).float()
    hot_src = copy.copy(src)
    hot_src._gather = WindowGather(feats, t, ahead=src._gather.ahead, stream=src._gather.stream,
                                   lines=src._gather.lines)

    def cold(kind: str, k: int) -> None:  # a new output while the last 16 stay alive: not in cache
        if kind == "gather":
            alive[kind].append(cold_src.gather(idx[k]))
        else:
            out = np.empty((block, f), mm.dtype)
            np.copyto(out, mm[blocks[k] : blocks[k] + block])
            alive[kind].append(out)

    def torch_half(way: str, k: int, lo: int, hi: int) -> None:
        out = torch.from_numpy(dst(way)).view(batch, t, f)
        torch.index_select(win, 0, torch.from_numpy(starts[k][lo:hi]), out=out[lo:hi])

    def memmove(way: str, k: int, lo: int, hi: int) -> None:
        ctypes.memmove(dst(way).ctypes.data + lo, mm[blocks[k]:].ctypes.data + lo, hi - lo)

    def two(fn, way: str, k: int, n: int) -> None:  # noqa: ANN001
        fut = ex.submit(fn, way, k, 0, n // 2)
        fn(way, k, n // 2, n)
        fut.result()

    warm = {"gather": (torch.randint(0, len(src), (batch,), generator=g)),
            "copy": int(torch.randint(0, feats.shape[0] - block, (1,), generator=g))}

    def hot(kind: str, k: int) -> None:
        """The untimed half of a `_hot_dst` way: the same call on other windows, just before (see ways)."""
        if kind == "gather":
            hot_src.gather(warm["gather"])
        else:
            np.copyto(dst(kind), mm[warm["copy"] : warm["copy"] + block])

    ways = {
        "windows": lambda k: gw(starts[k]),
        "windows_heads_only": lambda k: gw_heads(starts[k]),
        "windows_lines": lambda k: gw_lines(starts[k]),
        "windows_lines4": lambda k: gw_lines4(starts[k]),
        "windows_gil": lambda k: gw_gil(starts[k]),
        "windows_sorted": lambda k: gw_sorted(np.sort(starts[k])),
        "rows_take_fresh": lambda k: np.take(mm, (starts[k][:, None] + offs).reshape(-1), axis=0),
        "rows_take_reused": lambda k: np.take(mm, (starts[k][:, None] + offs).reshape(-1), axis=0,
                                              out=dst("rows_take_reused"), mode="clip"),
        "torch_windows_fresh": lambda k: torch.index_select(win, 0, torch.from_numpy(starts[k])),
        "torch_windows_reused": lambda k: torch_half("torch_windows_reused", k, 0, batch),
        "torch_windows_reused_2threads": lambda k: two(torch_half, "torch_windows_reused_2threads", k, batch),
        "gather_full": lambda k: src.gather(idx[k]),
        "gather_full_normalised": lambda k: norm_src.gather(idx[k]),
        "block_copy": lambda k: gw_block(starts[k]),
        **{f"blocks_{kb}k": (lambda k, kb=kb: random_blocks(kb, k)) for kb in (4, 16, 64, 256)},
        "copy_numpy": lambda k: np.copyto(dst("copy_numpy"), mm[blocks[k] : blocks[k] + block]),
        "gather_full_cold_dst": lambda k: cold("gather", k),
        "copy_numpy_cold_dst": lambda k: cold("copy", k),
        "gather_full_hot_dst": lambda k: hot_src.gather(idx[k]),
        "copy_numpy_hot_dst": lambda k: np.copyto(dst("copy_numpy_hot_dst"), mm[blocks[k] : blocks[k] + block]),
        "copy_numpy_hot_dst_huge": lambda k: np.copyto(dst("copy_numpy_hot_dst_huge"),
                                                       mm[blocks[k] : blocks[k] + block]),
        "copy_memcpy": lambda k: memmove("copy_memcpy", k, 0, nbytes),
        "copy_memcpy_2threads": lambda k: two(memmove, "copy_memcpy_2threads", k, nbytes),
    }
    assert len(ways) == n_ways
    res: dict[str, list[float]] = {k: [] for k in ways}
    cpu: dict[str, list[float]] = {k: [] for k in ways}
    order = list(ways)
    rng = random.Random(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # torch's gather on one OpenMP thread (the helper thread starts after this)
    try:
        for r in range(reps):
            rng.shuffle(order)
            for w, name in enumerate(order):
                k = r * n_ways + w
                if "_hot_dst" in name:  # its destination (and code) just used, on other windows
                    hot("gather" if name.startswith("gather") else name, k)
                t0, c0 = time.perf_counter(), time.thread_time()
                ways[name](k)
                c1, t1 = time.thread_time(), time.perf_counter()
                res[name].append(nbytes / (t1 - t0))
                cpu[name].append(nbytes / max(c1 - c0, 1e-9))
    finally:
        torch.set_num_threads(threads)
        ex.shutdown()
    # per CPU-second of the calling thread: the time this thread really ran, so a busy machine that
    # takes the core away mid-copy does not count (meaningless for the 2-thread ways: left out)
    return {**{k: statistics.median(v) for k, v in res.items()},
            **{f"{k}_per_cpu_s": statistics.median(v) for k, v in cpu.items() if "2threads" not in k}}


def bandwidth_fractions(bw: dict[str, float]) -> dict[str, float]:
    """The whole gather (targets included) over a contiguous copy of the same bytes (the issue's yardstick),
    and over the batch's own random blocks copied one plain memcpy each (what the same windows cost without
    the kernel's hints: a reference, not a ceiling; the hints can beat it, so that ratio may exceed 1)."""
    return {"gather_bw_fraction_of_copy": bw["gather_full"] / bw["copy_numpy"],
            "gather_bw_fraction_of_copy_per_cpu_s": bw["gather_full_per_cpu_s"] / bw["copy_numpy_per_cpu_s"],
            "gather_bw_fraction_of_memcpy": bw["gather_full"] / bw["copy_memcpy"],
            "gather_bw_fraction_of_block_copy": bw["gather_full"] / bw["block_copy"],
            "windows_bw_fraction_of_block_copy": bw["windows"] / bw["block_copy"],
            "block_copy_fraction_of_copy": bw["block_copy"] / bw["copy_numpy"],
            "gather_bw_fraction_of_copy_cold_dst": bw["gather_full_cold_dst"] / bw["copy_numpy_cold_dst"],
            "gather_bw_fraction_of_copy_hot_dst": bw["gather_full_hot_dst"] / bw["copy_numpy_hot_dst"],
            "gather_bw_fraction_of_copy_hot_dst_huge": bw["gather_full_hot_dst"] / bw["copy_numpy_hot_dst_huge"],
            "windows_lines_over_heads_only": bw["windows_lines"] / bw["windows_heads_only"],
            "windows_lines_over_lines4": bw["windows_lines"] / bw["windows_lines4"],
            "normalised_gather_over_gather": bw["gather_full_normalised"] / bw["gather_full"]}


def copy_ceiling_per_cpu_s(bw: dict[str, float]) -> float:
    """Bytes per CPU-second of the fastest plain copy measured (into its own buffer, or into one it just
    wrote): the most that any loader handing out materialised batches could reach on this host."""
    return max(bw["copy_numpy_per_cpu_s"], bw["copy_numpy_hot_dst_per_cpu_s"], bw["copy_numpy_hot_dst_huge_per_cpu_s"])


def ceiling_now(src: RowWindows, batch: int, copies: int = 8, seed: int = 0) -> float:
    """Bytes per CPU-second of the fastest plain copy of one float32 batch's bytes, measured now: the ways of
    `copy_ceiling_per_cpu_s` (a numpy copy into its own buffer, into one it has just written, and into one in
    2 MiB pages just written), `copies` timed copies each from random blocks of the store, the best way's
    median. Taken once a round of the loader runs, among them, so each round's fraction divides a loader's
    rate by the host's copy rate of the same minutes (the gather table's ceiling is timed after every loader
    run, and this host's copy rate moved by a fifth within the hour)."""
    from stride.data.gather import large_buffer

    mm = src.features.numpy()
    f, t = mm.shape[1], src.seq_len
    block = batch * t
    nbytes = block * f * mm.dtype.itemsize
    rng = np.random.default_rng(seed)
    own, hot = np.empty((block, f), mm.dtype), np.empty((block, f), mm.dtype)
    huge = large_buffer(nbytes).view(mm.dtype).reshape(block, f)
    best = 0.0
    for dst, warm in ((own, False), (hot, True), (huge, True)):
        rates = []
        for _ in range(copies):
            lo = int(rng.integers(0, mm.shape[0] - block))
            if warm:  # the destination just written, as a loader's reused buffer is
                w = int(rng.integers(0, mm.shape[0] - block))
                np.copyto(dst, mm[w : w + block])
            c0 = time.thread_time()
            np.copyto(dst, mm[lo : lo + block])
            rates.append(nbytes / max(time.thread_time() - c0, 1e-9))
        best = max(best, statistics.median(rates))
    return best


def stream_ceiling_now(src: RowWindows, batch: int, copies: int = 8, seed: int = 0) -> float:
    """Bytes per CPU-second of the window kernel's own copy of one contiguous block of a batch's bytes (one
    window B*T rows long, with the loader's hints: streaming stores, page streams). The plain copies of
    `ceiling_now` write through the cache; if the kernel's copy beat them, they would bound only loaders
    built on a plain copy, not the memory system. On the Intel Xeon host where `fraction_of_copy_bound_cpu`
    read above 1 the two were level (1.009-1.012x): that reading was the plain ceiling's round-to-round
    noise. Medians of `copies` blocks from random places of the store, timed beside `ceiling_now`."""
    from stride.data.gather import WindowGather

    feats, g = src.features, src._gather
    block = batch * src.seq_len
    nbytes = block * feats.shape[1] * feats.element_size()
    kernel = WindowGather(feats, block, ahead=g.ahead, stream=g.stream, lines=g.lines)
    rng = np.random.default_rng(seed + 1000)
    kernel(np.array([int(rng.integers(0, feats.shape[0] - block))]))  # its buffers made once, as the loader's
    rates = []
    for _ in range(copies):
        lo = np.array([int(rng.integers(0, feats.shape[0] - block))])
        c0 = time.thread_time()
        kernel(lo)
        rates.append(nbytes / max(time.thread_time() - c0, 1e-9))
    return statistics.median(rates)


def same_batches(src: RowWindows, ds: SliceDataset, batch: int) -> None:
    """Both loaders hand out the same (x, y) for the same window ids (the same work), or the benchmark stops."""
    ids = torch.randint(0, len(src), (batch,), generator=torch.Generator().manual_seed(1))
    x, y = src.gather(ids)
    xr, yr = torch.utils.data.default_collate([ds[int(i)] for i in ids])
    if x.dtype != xr.dtype or not torch.equal(x, xr) or not torch.allclose(y, yr, rtol=1e-6, atol=1e-7):
        raise SystemExit(f"stride and the plain Dataset disagree on a batch ({x.dtype} vs {xr.dtype})")


def sequential(src: RowWindows, ds: SliceDataset, batch: int, nb: int, repeats: int) -> dict[str, object]:
    """Windows in time order: window gather vs one slab + unfold per batch vs a plain sequential DataLoader.

    `slab_contiguous` materialises each overlapping view on the host (numpy, from the cached slab) for
    consumers that need dense windows: the writes come back, the random reads do not.
    """
    from stride.data.sequential import SequentialWindows

    ways = {
        "gather_sequential": lambda: ShardedLoader(src, batch, shuffle=False, drop_last=False, stateful=False),
        "slab_unfold": lambda: SequentialWindows(src, batch),
        "slab_unfold_prefetch": lambda: SequentialWindows(src, batch, prefetch=2),
        "slab_contiguous": lambda: SequentialWindows(src, batch, contiguous=True),
        "torch_sequential_w0": lambda: torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=False),
    }
    wall: dict[str, list[float]] = {k: [] for k in ways}
    cpu: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(repeats):
        for name, make in ways.items():
            a, c = time_windows(make, nb if "torch" not in name else max(8, nb // 2), batch)
            wall[name].append(a)
            cpu[name].append(c)
    med = {k: statistics.median(v) for k, v in wall.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    return {"windows_per_s": {k: round(v) for k, v in med.items()},
            "windows_per_cpu_s": {k: round(v) for k, v in med_cpu.items()},
            "slab_vs_gather": med["slab_unfold"] / med["gather_sequential"],
            "slab_vs_gather_cpu": med_cpu["slab_unfold"] / med_cpu["gather_sequential"],
            "slab_vs_torch_dataloader": max(med["slab_unfold"], med["slab_unfold_prefetch"])
            / med["torch_sequential_w0"]}


def data_wait(steps: int, prefetch: int) -> dict[str, float]:
    from stride.config import load_config
    from stride.train.trainer import Trainer

    cfg = load_config("configs/quickstart.toml", [f"train.steps={steps}", "train.val_every=0",
                                                   "metrics.progress=false", f"data.prefetch={prefetch}"])
    with tempfile.TemporaryDirectory() as d:
        s = Trainer(config=cfg, out=d).fit().summary
    return {"data_s": s["step_time_breakdown_s"]["data"], "step_s": s["step_time_s"],
            "fraction": s["step_time_breakdown_s"]["data"] / s["step_time_s"]}


RSS_MODES = {"plain": (False, 0.0), "hints": (True, 0.0), "hints_resident256": (True, 256.0)}


def rss_child(store: str, seq_len: int, batch: int, max_batches: int, mode: str) -> None:
    """Run in a fresh process with the store dropped from the page cache (cold): iterate the loader,
    print windows/s, peak/anon/file RSS in MiB, faults and bytes read from disk as JSON."""
    import resource

    fd = os.open(Path(store) / "values.bin", os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # clean pages leave the page cache: a cold start
    os.close(fd)
    hints, resident = RSS_MODES[mode]
    src = stride_source(Path(store), seq_len, [1, 5, 20], hints=hints, resident_mb=resident)

    def io() -> int:
        return int(next(ln for ln in Path("/proc/self/io").read_text().splitlines()
                        if ln.startswith("read_bytes")).split()[1])

    ld = ShardedLoader(src, batch, prefetch=2)
    r0, io0, n = resource.getrusage(resource.RUSAGE_SELF), io(), 0
    t0 = time.perf_counter()
    for _x, _y in ld:
        n += 1
        if n >= max_batches:
            break
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    status = Path("/proc/self/status").read_text()
    kb = {ln.split(":")[0]: int(ln.split()[1]) for ln in status.splitlines() if ln.startswith(("Rss", "VmHWM"))}
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    # VmHWM, not ru_maxrss: the latter survives exec and starts at the forking parent's RSS
    print(json.dumps({"mode": mode, "peak_rss_mb": round(kb.get("VmHWM", 0) / 1024),
                      "rss_anon_mb": round(kb.get("RssAnon", 0) / 1024),
                      "rss_file_mb": round(kb.get("RssFile", 0) / 1024),
                      "windows": len(src), "batches": n, "windows_per_s": round(n * batch / dt), "cpu_s": round(cpu, 2),
                      "major_faults": r1.ru_majflt - r0.ru_majflt, "disk_read_mb": round((io() - io0) / 2**20)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=256, help="dataset size for the throughput runs")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", type=int, default=40, help="timed batches per loader run")
    # 5, not 3: with 3, two loaders of the same settings read up to 22% apart on a busy host (3% in a run with 5)
    ap.add_argument("--repeats", type=int, default=5, help="rounds of every loader, in a new shuffled order each")
    ap.add_argument("--steps", type=int, default=30, help="training steps for the data-wait figure")
    ap.add_argument("--rss-gb", default="", help="comma-separated store sizes in GiB for the RSS check")
    ap.add_argument("--rss-batches", type=int, default=1000)
    ap.add_argument("--workdir", default=None, help="where the temporary stores go (default: a temp dir)")
    ap.add_argument("--gather-only", action="store_true", help="only the gather/copy bandwidth table")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--_rss-child", dest="rss_child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rss-mode", default="hints", choices=list(RSS_MODES), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rss_child:
        rss_child(args.rss_child, args.seq_len, args.batch, args.rss_batches, args.rss_mode)
        return
    torch.set_num_threads(max(1, (os.cpu_count() or 2)))
    horizons = [1, 5, 20]
    work = Path(tempfile.mkdtemp(dir=args.workdir, prefix="stride-bench-data-"))
    out: dict[str, object] = {"dataset_mb": args.mb, "seq_len": args.seq_len, "batch": args.batch,
                              "threads": torch.get_num_threads(), "cpu": cpu_name(),
                              "cores": len(os.sched_getaffinity(0)), "load_before": os.getloadavg()}
    try:
        store = make_store(work / "store", args.mb)
        srcs = {"float32": stride_source(store, args.seq_len, horizons)}
        dss = {"float32": SliceDataset(store, args.seq_len, horizons)}
        if not args.gather_only:
            bf = bf16_copy(store, work / "store-bf16")
            srcs["bfloat16"] = stride_source(store, args.seq_len, horizons, features=bf)
            dss["bfloat16"] = SliceDataset(store, args.seq_len, horizons, features=bf)
        src = srcs["float32"]
        for dt, s in srcs.items():
            _ = s.gather(torch.arange(0, len(s), max(1, len(s) // 4096)))
            same_batches(s, dss[dt], args.batch)
        if args.gather_only:
            bw = gather_vs_copy(src, args.batch, max(50, 30 * args.repeats))
            out["bandwidth_GBps"] = {k: round(v / 1e9, 2) for k, v in bw.items()}
            out.update(bandwidth_fractions(bw))
            out["load_after"] = os.getloadavg()
            print(json.dumps(out))
            return
        # `data.gather_threads` = k on hosts with the cores for it (k <= cores): one batch split over k threads
        cores = len(os.sched_getaffinity(0))
        ks = [k for k in (2, 4, 8) if k <= cores]
        ksrcs = {(dt, k): stride_source(store, args.seq_len, horizons, features=bf if dt == "bfloat16" else None,
                                        gather_threads=k) for dt in srcs for k in ks}
        for (dt, _k), ks_src in ksrcs.items():
            same_batches(ks_src, dss[dt], args.batch)
        # the loader as a run gets it: settings from a fresh probe of this host (`data.prefetch/gather_threads="auto"`)
        asrcs = {dt: stride_source(store, args.seq_len, horizons, features=bf if dt == "bfloat16" else None)
                 for dt in srcs}
        plans = {dt: plan_loader(a, args.batch, torch.device("cpu"), "auto", "auto", fresh=True)
                 for dt, a in asrcs.items()}
        for dt, a in asrcs.items():
            same_batches(a, dss[dt], args.batch)
        names = ["stride", "stride_auto", "stride_1thread", "stride_prefetch", *[f"stride_gather{k}" for k in ks],
                 "torch_w0", "torch_w1", "torch_w2"]
        rates = {dt: {k: [] for k in names} for dt in srcs}
        cpu_rates = {dt: {k: [] for k in names} for dt in srcs}
        rates["float32"]["torch_w0_previous"], cpu_rates["float32"]["torch_w0_previous"] = [], []
        ds_prev = SliceDataset(store, args.seq_len, horizons, previous=True)
        same_batches(src, ds_prev, args.batch)
        nb = args.batches

        def run(dt: str, name: str, make, n: int) -> None:  # noqa: ANN001
            wall, cpu = time_windows(make, n, args.batch)
            rates[dt][name].append(wall)
            cpu_rates[dt][name].append(cpu)

        runs: list[tuple[str, str, object, int]] = []  # (dtype, name, loader factory, torch threads)
        for dt, s in srcs.items():
            runs += [(dt, "stride", lambda s=s: ShardedLoader(s, args.batch, prefetch=0), 0),
                     (dt, "stride_auto", lambda a=asrcs[dt], p=plans[dt].prefetch: ShardedLoader(a, args.batch,
                                                                                                  prefetch=p), 0),
                     (dt, "stride_1thread", lambda s=s: ShardedLoader(s, args.batch, prefetch=0), 1),
                     (dt, "stride_prefetch", lambda s=s: ShardedLoader(s, args.batch, prefetch=2), 0)]
            # one torch thread in each of the k gathering threads
            runs += [(dt, f"stride_gather{k}", lambda s=ksrcs[dt, k]: ShardedLoader(s, args.batch, prefetch=0), 1)
                     for k in ks]
            for w in (0, 1, 2):
                def make(w: int = w, ds: SliceDataset = dss[dt]) -> torch.utils.data.DataLoader:
                    return torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True, num_workers=w,
                                                       pin_memory=False, persistent_workers=w > 0)
                runs.append((dt, f"torch_w{w}", make, 0))
        runs.append(("float32", "torch_w0_previous",
                     lambda: torch.utils.data.DataLoader(ds_prev, batch_size=args.batch, shuffle=True), 0))
        runs.append(("", "copy_ceiling", None, 1))  # the host's copy rate, taken among the loaders each round
        ceilings: list[float] = []
        stream_ceilings: list[float] = []  # the kernel's own contiguous copy, the same minutes
        order = random.Random(0)
        for r in range(args.repeats):  # every loader of both dtypes in a new shuffled order each repeat
            order.shuffle(runs)
            for dt, name, make_loader, n_threads in runs:
                if name == "copy_ceiling":
                    ceilings.append(ceiling_now(src, args.batch, seed=r))
                    stream_ceilings.append(stream_ceiling_now(src, args.batch, seed=r))
                    continue
                torch.set_num_threads(n_threads or out["threads"])  # type: ignore[arg-type]
                # stride's rows time 5x the batches: each takes a tenth of the plain loader's time, and 40
                # of them (16 ms) moved with every scheduler tick (the same loader read 469k-683k a CPU-s)
                run(dt, name, make_loader, nb * (5 if name.startswith("stride") else 1))
        torch.set_num_threads(out["threads"])  # type: ignore[arg-type]
        bw = gather_vs_copy(src, args.batch, max(50, 30 * args.repeats))
        out["bandwidth_GBps"] = {k: round(v / 1e9, 2) for k, v in bw.items()}
        out["windows_per_s"], out["windows_per_cpu_s"] = {}, {}
        for dt in srcs:
            med = {k: statistics.median(v) for k, v in rates[dt].items()}
            cpu = {k: statistics.median(v) for k, v in cpu_rates[dt].items()
                   if k in ("stride", "stride_auto", "stride_prefetch", "torch_w0", "torch_w0_previous")}
            best_torch = max(med["torch_w0"], med["torch_w1"], med["torch_w2"])
            best_stride = max(v for k, v in med.items() if k.startswith("stride"))
            tag = "" if dt == "float32" else "_bf16"
            out[f"best_stride_loader{tag}"] = max((k for k in med if k.startswith("stride")), key=med.__getitem__)
            out["windows_per_s"][dt] = {k: round(v) for k, v in med.items()}  # type: ignore[index]
            out["windows_per_cpu_s"][dt] = {k: round(v) for k, v in cpu.items()}  # type: ignore[index]
            out[f"speedup_vs_torch_dataloader{tag}"] = best_stride / best_torch
            out[f"speedup_vs_torch_dataloader_cpu{tag}"] = max(cpu["stride"], cpu["stride_prefetch"]) / cpu["torch_w0"]
            # the ceiling of a loader that materialises every window: the copy rate per CPU-second, taken in
            # each round among the loader runs (`ceiling_now`); the gather table's, timed after them, beside it
            window_bytes = args.seq_len * srcs[dt].features.shape[1] * srcs[dt].features.element_size()
            ceiling = statistics.median(ceilings)
            out[f"copy_bound_windows_per_cpu_s{tag}"] = round(ceiling / window_bytes)
            out[f"copy_bound_speedup_vs_torch_dataloader_cpu{tag}"] = (
                ceiling / window_bytes / cpu["torch_w0"])
            # what the host allows, reached: the loader as probed (goal >= 0.9), each round against that round's
            # ceiling, the median; and prefetch against none
            by_round = [w * window_bytes / c for w, c in zip(cpu_rates[dt]["stride_auto"], ceilings, strict=True)]
            out[f"fraction_of_copy_bound_cpu{tag}"] = statistics.median(by_round)
            # each round's, to show the spread: a run right after a plain DataLoader run (whose fresh batches and
            # randperm evict the store's lines) reads 8-10 % slower over its first 150 batches (docs/data.md)
            out[f"fraction_of_copy_bound_cpu_by_round{tag}"] = [round(f, 3) for f in by_round]
            out[f"fraction_of_stream_copy_cpu{tag}"] = statistics.median(
                w * window_bytes / c for w, c in zip(cpu_rates[dt]["stride_auto"], stream_ceilings, strict=True))
            out[f"fraction_of_copy_bound_cpu_table_ceiling{tag}"] = cpu["stride_auto"] / (
                copy_ceiling_per_cpu_s(bw) / window_bytes)
            out[f"prefetch_over_no_prefetch_cpu{tag}"] = cpu["stride_prefetch"] / cpu["stride"]
            out[f"probe_plan{tag}"] = {"prefetch": plans[dt].prefetch, "gather_threads": plans[dt].gather_threads,
                                       "copy": plans[dt].figures.get("chosen_copy"), "reasons": plans[dt].reasons}
        out["headline"] = "float32 (the store's default dtype; bf16 halves the bytes by dropping precision)"
        out["copy_ceiling_GBps_by_round"] = [round(c / 1e9, 2) for c in ceilings]
        out["stream_copy_ceiling_GBps_by_round"] = [round(c / 1e9, 2) for c in stream_ceilings]
        out["stream_copy_over_plain_copy"] = statistics.median(
            k / c for k, c in zip(stream_ceilings, ceilings, strict=True))
        out["gather_threads_tried"] = [1, *ks]
        out.update(bandwidth_fractions(bw))
        out["sequential"] = sequential(src, dss["float32"], args.batch, nb, args.repeats)
        waits = {p: data_wait(args.steps, p) for p in (2, 0)}
        out["data_wait"] = {f"prefetch_{p}": v for p, v in waits.items()}
        out["data_wait_fraction_default_bench"] = waits[2]["fraction"]
        if args.rss_gb:
            rss: dict[str, dict[str, object]] = {}
            for gb in [float(g) for g in args.rss_gb.split(",")]:
                p = make_store(work / f"rss-{gb}", gb * 1024)
                try:
                    for mode in RSS_MODES:
                        # without hints, a fault in a 10 GiB store reads 8 MiB around it: fewer batches
                        nb = min(args.rss_batches, 300) if mode == "plain" else args.rss_batches
                        r = subprocess.run([sys.executable, __file__, "--_rss-child", str(p), "--rss-mode", mode,
                                            "--seq-len", str(args.seq_len), "--batch", str(args.batch),
                                            "--rss-batches", str(nb)], capture_output=True, text=True, check=True)
                        rss[f"{gb:g}GiB_{mode}"] = json.loads(r.stdout.strip().splitlines()[-1])
                finally:
                    shutil.rmtree(p)  # a 10 GiB store must not outlive its measurement
            out["rss"] = rss
            sizes = [float(g) for g in args.rss_gb.split(",")]
            lo, hi = f"{sizes[0]:g}GiB", f"{sizes[-1]:g}GiB"
            for mode in ("hints", "hints_resident256"):
                peak = [rss[f"{size}_{mode}"]["peak_rss_mb"] for size in (lo, hi)]
                out[f"rss_peak_growth_mb_{mode}"] = peak[1] - peak[0]  # type: ignore[operator]
            out["rss_anon_growth_mb"] = rss[f"{hi}_hints"]["rss_anon_mb"] - rss[f"{lo}_hints"]["rss_anon_mb"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["load_after"] = os.getloadavg()
    if not args.json:
        for k, v in out.items():
            print(f"{k}: {v}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
