"""The loader's settings chosen per host by measuring, not guessing: copy kernel, gather threads, prefetch.

`plan_loader` answers, for one window source and batch size on this host and device:
- **copy**: the C kernel as one memcpy a window, or with page-head hints `AHEAD` windows ahead, with
  or without the next windows' lines hinted while pages copy as 1, 4 or `LINES` (12) interleaved streams
  (`lines`), and, for batches at least the size of the L2 cache, with or without streaming stores, or the numpy
  fallback: timed in shuffled rounds (CPU time of this thread, `BURST` batches back to back), each timing on
  batches no other timing read, so none finds its windows in cache; of the variants within `TIE` of the
  fastest, the one with the fewest page streams kept (all give the same bytes; `choose_copy` says why).
- **gather threads**: 1, or k > 1 where k threads are free (the device is not the CPU, or the CPU
  has cores torch's threads do not use) and k split batches ran at least 15% faster (wall time).
- **prefetch** (a background thread building batches ahead): only where a core is free for it
  while the step runs (a GPU step, or spare cores), and where taking a batch from the thread costs the
  main thread at most half of building it (both measured; `PREFETCH_TAKE_SHARE` says why half). On a
  CPU whose cores all run torch's threads the step and the gather share the same cores: prefetching
  moves no work off them and adds the hand-off (measured on the AMD EPYC development host: the
  quick-start loader took 34 us of CPU a batch in the step and 101 us with a prefetch thread).
The probe takes a few tenths of a second; its result is kept per host (CPU model and flags, usable
cores, torch version and threads, the kernel's source) and per source shape in a JSON file: the
store's `derived/loader_probe.json` for a store (beside its other derived files; the host cache
where that folder cannot be written), `$STRIDE_CACHE_DIR/loader_probe.json` (else
~/.cache/stride/) otherwise. `stride data probe CONFIG` measures afresh. The plan and its figures go
into the run's summary.json (`data_loader`). A cached plan is input like any file (`plan_problem`): one whose
settings are not what the probe chooses (3000 gather threads, a prefetch depth of 50000, a negative `ahead`, taken
as they were: audit 14, M4) is measured again, with a warning naming the file and the value.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import platform
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stride.data import native
from stride.data.gather import AHEAD, LINES, MAX_LINES, l2_bytes
from stride.data.loader import ShardedLoader
from stride.data.store import derived_dir, derived_writable
from stride.files import rank_share
from stride.files.input_file import InputFileError, InputFileMissing, read_input_text
from stride.files.user_cache import user_cache_dir

log = logging.getLogger("stride.data")

PROBE_VERSION = 9  # 2: `ahead` (windows whose page heads are hinted) replaced `read_ahead` (bytes); 3: `lines`;
# 4: `lines` is the number of page streams (0, 4 or LINES), no longer on/off; 5: the fewest streams within TIE;
# 6: prefetch only where it takes at least half of a batch's cost off the main thread (PREFETCH_TAKE_SHARE);
# 7: copy variants timed over BURST batches, not 2, and TIE 2 %, not 5 %; 8: page heads hinted 2 windows ahead
# (gather.AHEAD), not 4, and the log-price picks hinted once a window (copy_kernel.c); 12 streams must beat 4 by
# MANY_STREAMS_MARGIN; 9: 1 page stream (the next window's lines hinted one window ahead) timed too
BUDGET_S = 0.3  # measuring time, split among the variants
FRESH_BATCHES = 256  # batches of window ids cycled through (1 GiB of 16 KiB windows at batch 256: past any L3)
TIE = 0.02  # copy variants this close to the fastest count as level (choose_copy)
FEW_STREAMS, MANY_STREAMS_MARGIN = 4, 0.08  # more page streams must be 8 % faster than 4 or fewer (choose_copy)
# Batches a copy timing runs back to back. Timed over 2 batches (after an untimed one), 12 page streams read
# level with 4 (0.408 against 0.408 ms a 4 MiB batch), while over 4, 8 or 16 batches they read 1.20-1.27x
# slower, as in the loader itself (1.22x): Intel Xeon, KVM, 10 alternated rounds (2026-12-04). So 1 benchmark
# run in 3-5 chose 12 streams and its loader ran at 0.79 of the copy ceiling instead of 0.96-0.97.
BURST = 8
MIN_ROUNDS, MAX_ROUNDS = 6, 16  # rounds of every copy variant, whatever the budget
FASTER = 1.15  # gather threads must beat one thread by this much (wall time) to be chosen
# Prefetch is chosen only where taking a batch from the thread costs the main thread at most this share of
# building it. Why not any saving: a thread handing batches over costs the step too (GIL hand-offs, wake-ups),
# which the probe's per-batch figures do not see. On the quick-start model with a core free (Intel Xeon,
# KVM, 1 torch thread) the probe read 23-25 us to build a batch and 17-22 us to take one, so it turned
# prefetch on for a few microseconds a 45 ms step; trained both ways (benchmarks/prefetch_ab.py), the run with
# prefetch was no faster: paired medians 1.022, 1.012 and 1.004 in three runs of 8-16 alternated pairs. Where
# it pays, taking is a small share of building: 4 MiB float32 windows 0.40-0.49 ms against 0.02-0.03 ms (bf16
# 0.21-0.27 against 0.02-0.03), and such a run trained 5-9 % faster with prefetch (paired 0.914 and 0.952).
PREFETCH_TAKE_SHARE = 0.5


@dataclass
class LoaderPlan:
    prefetch: int
    gather_threads: int
    ahead: int = AHEAD
    stream: bool | None = None
    lines: int = LINES
    native: bool = True
    origin: str = "config"  # probe | cache | config
    figures: dict[str, Any] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def copy_settings(plan: dict[str, Any]) -> dict[str, Any]:
    """`configure_gather`'s copy keywords from a plan (`LoaderPlan.as_dict()`, summary's `data_loader`): one
    list, so a new copy choice reaches every loader the plan configures."""
    return {"use_native": plan["native"], "ahead": plan["ahead"], "stream": plan["stream"], "lines": plan["lines"]}


def usable_cores() -> int:
    """This process's share of the cores it may run on (its CPU affinity): the other local ranks of its launcher
    share them (torchrun's LOCAL_WORLD_SIZE), unless each rank was pinned to cores of its own (the rule of
    stride.files.rank_share, which the threads warning and the CPU peak read too). 2 ranks of 1 torch thread on 2
    cores, unpinned, counted a free core each that did not exist (review of 2026-12-07)."""
    return max(1, rank_share.usable_cores() // (rank_share.ranks_sharing_cores() or 1))


def _cpuinfo() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return f.read().splitlines()
    except OSError:
        return []


def cpu_name() -> str:
    """The CPU's model name ('AMD EPYC'), as /proc/cpuinfo gives it."""
    lines = _cpuinfo()
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith(("model name", "Model"))), "") \
        or platform.processor() or platform.machine()


def _cpu_signature() -> str:
    flags = next((ln.split(":", 1)[1] for ln in _cpuinfo() if ln.startswith(("flags", "Features"))), "")
    return f"{cpu_name()}|flags:{hashlib.sha256(' '.join(sorted(flags.split())).encode()).hexdigest()[:12]}"


def plan_key(source: Any, batch: int, device: torch.device) -> str:
    """What the plan depends on: host, cores, torch and its threads, the kernel, the batch's shape and dtypes."""
    g = source._gather
    kernel = hashlib.sha256(native.SOURCE.read_bytes()).hexdigest()[:12]
    return (f"v{PROBE_VERSION}|{_cpu_signature()}|cores:{usable_cores()}|torch:{torch.__version__}|"
            f"threads:{torch.get_num_threads()}|kernel:{kernel}|device:{device.type}|rows:{g.dtype}|"
            f"T:{g.seq_len}|F:{g._f}|batch:{batch}|{source.batch_signature()}")


def cache_path(store: str | None = None) -> Path:
    if store and derived_writable(Path(store)):  # a derived/ leading out of the store: refused (StoreError)
        return derived_dir(Path(store)) / "loader_probe.json"
    return user_cache_dir() / "loader_probe.json"


PROBE_FILE_MAX_BYTES = 16 << 20  # a plan is ~2 KiB: thousands of hosts and shapes


def _read(path: Path, quiet: bool = False) -> dict[str, Any]:
    """The cached plans; {} where there are none yet or the file is damaged (said once, unless `quiet`)."""
    try:  # a regular file only (a FIFO or /dev/zero is never read), of at most PROBE_FILE_MAX_BYTES
        obj = json.loads(read_input_text(path, limit=PROBE_FILE_MAX_BYTES, what="loader probe cache"))
    except InputFileMissing:
        return {}  # none yet
    except (InputFileError, ValueError, RecursionError) as exc:
        if not quiet:
            why = str(exc) if isinstance(exc, InputFileError) else f"{path}: not JSON ({exc})"
            log.warning("stride: %s: measuring the loader again", why)
        return {}
    return obj if isinstance(obj, dict) else {}


def _write(path: Path, key: str, plan: LoaderPlan) -> None:
    kept = _read(path, quiet=True)
    kept[key] = {k: v for k, v in plan.as_dict().items() if k != "origin"}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(kept, indent=1))
        tmp.replace(path)  # a reader sees the old file or the new one
    except OSError:
        pass  # read-only: the plan still holds for this run


def _timed(fn, idx: list[torch.Tensor], clock) -> float:  # noqa: ANN001
    t0 = clock()
    for i in idx:
        fn(i)
    return (clock() - t0) / len(idx)


def choose_copy(med: dict[str, float], variants: dict[str, dict[str, Any]]) -> str:
    """The copy variant to keep: of the native ones within TIE of the fastest, the one with the fewest page
    streams (then the fastest); more than FEW_STREAMS streams only where they beat the best of FEW_STREAMS or
    fewer by MANY_STREAMS_MARGIN; numpy only where it is the fastest.

    Why not simply the fastest: variants truly level read a % or two apart from run to run, and fewer streams
    are the smaller bet. The band was 5 % while the probe timed 2 batches a variant, which could not see what 12
    streams cost a loader (level with 4 over 2 batches, 1.2-1.27x slower over 4-16 and in the loader; Intel
    Xeon, KVM). Timed over BURST batches the probe sees it, and a 5 % band then handed the choice to slower
    variants: in 10 fresh probes of a bf16 store the fastest variant (4 streams, 0.212 ms a batch against
    0.221-0.230 for the others, medians) was the fastest 8 times but kept 5 times. Where more streams really
    pay (AMD EPYC: 12 streams 11-17 % faster than 4) they are chosen either way.

    Why the margin for 12 streams: on a store just written (a benchmark's, a first run's) 12 streams timed
    2-5 % ahead of 4 (5 probes, Intel Xeon KVM, 2026-12-04; the same probes on a store written an hour
    earlier timed them 15-20 % behind), and the loaders that then ran with them read 0.78-0.87 of the copy
    ceiling in 4 benchmark runs of 4, against 0.90-0.96 with 4 streams (7 runs) and 0.89-0.91 with none (6)."""
    fastest = min(med, key=med.__getitem__)
    native = {k: v for k, v in med.items() if k != "numpy"}
    if fastest == "numpy" or not native:
        return fastest

    def streams(k: str) -> int:
        return int(variants[k].get("lines", LINES))

    few = {k: v for k, v in native.items() if streams(k) <= FEW_STREAMS}
    pool = few if few and min(native.values()) > min(few.values()) * (1 - MANY_STREAMS_MARGIN) else native
    best = min(pool.values())
    return min((k for k in pool if pool[k] <= best * (1 + TIE)), key=lambda k: (streams(k), med[k]))


def measure(source: Any, batch: int, device: torch.device, budget_s: float = BUDGET_S) -> LoaderPlan:
    """Time the variants on this host (see the module docstring) and return the plan with its figures."""
    n, rng = len(source), torch.Generator().manual_seed(0)
    per = min(n, batch)
    idx = [torch.randint(0, n, (per,), generator=rng) for _ in range(FRESH_BATCHES)]
    # every timing on batches of its own: a variant timed on the windows the previous one just read finds
    # them in cache (the first probe timed all variants of a round on the same 2 batches, and so chose)
    fresh = itertools.cycle(idx)
    source.gather(next(fresh))  # build the kernel, map pages
    big = per * source._gather.seq_len * source._gather._f * source._gather._raw.element_size() >= l2_bytes()
    variants: dict[str, dict[str, Any]] = {"numpy": {"use_native": False}}
    if native.load() is not None:
        variants["native_ahead0"] = {"ahead": 0, "stream": False, "lines": 0}  # one memcpy a window
        # page-head hints, with 0, 1, 4 (glibc's memcpy) or LINES interleaved page streams (LINES won on the first AMD
        # EPYC host: 12 streams took 16-17% off a float32 batch against 4; another core keeps fewer misses in
        # flight). 1 stream: one window after another, each line of the next window hinted as the same line of this
        # one copies (a software prefetch one window ahead): on the AMD EPYC family 26 host (Zen 5) random 16 KiB
        # windows lose 40 % of a contiguous copy's bandwidth with plain memcpy, and that stream of hints won
        # back the most (the loader's windows per CPU-second 1.10x those with page-head hints alone, 4 streams 0.92x;
        # variants alternated in one process, 6 rounds of 400 batches, load 1.3; docs/data.md)
        for lines in sorted({0, 1, 4, LINES}):
            for st in ((False, True) if big else (False,)):
                variants[f"native_ahead{AHEAD}{f'_lines{lines}' if lines else ''}{'_stream' if st else ''}"] = \
                    {"ahead": AHEAD, "stream": st, "lines": lines}
    source.configure_gather(1, **variants["numpy"])
    one = _timed(source.gather, [next(fresh) for _ in range(2)], time.thread_time)
    # at least MIN_ROUNDS: with 2-4 rounds (a cold first timing made `one` look slow) the medians were noisy
    # enough to keep 12 streams in 2 benchmark runs of 5, whose loaders then ran at 0.76-0.83 of the copy
    rounds = int(max(MIN_ROUNDS, min(MAX_ROUNDS, budget_s / (BURST + 1) / max(one, 1e-5) / len(variants))))
    times: dict[str, list[float]] = {k: [] for k in variants}
    order, shuffle = list(variants), random.Random().shuffle  # a fresh order each probe: none always follows one
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            source.configure_gather(1, **variants[name])
            # one batch untimed: a new gather's first batch faults in its buffer, which a loader then reuses;
            # timed from the first, streaming stores won (they skip the faulted buffer's cache lines) and
            # the loader ran slower with them (bf16: 0.65 of the default's windows per CPU-second, AMD EPYC)
            source.gather(next(fresh))
            times[name].append(_timed(source.gather, [next(fresh) for _ in range(BURST)], time.thread_time))
    med = {k: statistics.median(v) for k, v in times.items()}
    best = choose_copy(med, variants)
    best_s = med[best]
    copy_cfg = variants[best]
    x0 = source.gather(next(fresh))[0]
    bytes_per = x0.numel() * x0.element_size()
    figures: dict[str, Any] = {"batch_ms": {k: v * 1e3 for k, v in med.items()}, "chosen_copy": best,
                               "window_bytes": bytes_per // per, "batch_windows": per,
                               "gather_GBps_per_cpu_s": bytes_per / best_s / 1e9,
                               "copy_GBps_per_cpu_s": _copy_rate(source, bytes_per),
                               "native": native.load() is not None,
                               "native_unavailable": native.unavailable_reason() or None}
    figures["gather_fraction_of_copy"] = figures["gather_GBps_per_cpu_s"] / figures["copy_GBps_per_cpu_s"]
    reasons = {"copy": f"{best}: {best_s * 1e3:.3f} ms a batch of {per} ({len(variants)} variants timed in {rounds} "
                       f"shuffled rounds of {BURST} batches, the fastest {min(med, key=med.__getitem__)}; the "
                       f"fewest page streams within {TIE:.0%} of the fastest, more than {FEW_STREAMS} only "
                       f"{MANY_STREAMS_MARGIN:.0%} ahead of {FEW_STREAMS} or fewer)"}
    cores, tthreads = usable_cores(), torch.get_num_threads()
    free = cores if device.type != "cpu" else max(0, cores - tthreads)
    threads = 1
    if free >= 1:
        ks = [k for k in (2, 4, 8) if k - 1 <= free and k <= cores]  # this thread and k - 1 helpers
        walls = {1: _timed(source.gather, [next(fresh) for _ in range(4)], time.perf_counter)}
        for k in ks:
            source.configure_gather(k, **copy_cfg)
            walls[k] = _timed(source.gather, [next(fresh) for _ in range(4)], time.perf_counter)
        fastest = min(walls, key=walls.__getitem__)
        threads = fastest if walls[1] / walls[fastest] >= FASTER else 1
        figures["gather_threads_wall_ms"] = {str(k): v * 1e3 for k, v in walls.items()}
        reasons["gather_threads"] = f"{threads}: wall ms a batch by threads {figures['gather_threads_wall_ms']}"
    else:
        reasons["gather_threads"] = f"1: torch's {tthreads} threads use all {cores} usable cores"
    source.configure_gather(threads, **copy_cfg)
    prefetch, reasons["prefetch"] = _choose_prefetch(source, batch, device, free, figures)
    return LoaderPlan(prefetch, threads, int(copy_cfg.get("ahead", AHEAD)), copy_cfg.get("stream"),
                      int(copy_cfg.get("lines", LINES)), best != "numpy", "probe", figures, reasons)


def _copy_rate(source: Any, nbytes: int, reps: int = 5) -> float:
    """GB per CPU-second of one contiguous copy of `nbytes` of the source's rows (numpy, the same buffer)."""
    rows = source._gather._rows
    flat = rows.reshape(-1).view(np.uint8)
    nbytes = min(nbytes, flat.size // 2)
    dst = np.empty(nbytes, np.uint8)
    lo = np.random.default_rng(1).integers(0, flat.size - nbytes, reps)
    out = []
    for a in lo.tolist():
        c0 = time.thread_time()
        np.copyto(dst, flat[a : a + nbytes])
        out.append(time.thread_time() - c0)
    return nbytes / max(statistics.median(out), 1e-9) / 1e9


def _choose_prefetch(source: Any, batch: int, device: torch.device, free: int, figures: dict) -> tuple[int, str]:
    if free < 1:
        return 0, (f"0: no core is free for a prefetch thread (torch uses {torch.get_num_threads()} threads on "
                   f"{usable_cores()} usable cores; the step and the gather would share them)")
    main: dict[int, list[float]] = {}
    k = min(6, len(ShardedLoader(source, batch, drop_last=False)) - 1)
    if k < 2:
        return 0, "0: too few batches to measure a prefetch thread against"
    for run, depth in enumerate((0, 2, 0, 2)):  # the main thread's CPU a batch, building it or taking it
        # from the thread; each run its own order (seed), so none reads windows the previous one left in cache
        it = iter(ShardedLoader(source, batch, seed=run, prefetch=depth, stateful=False, drop_last=False))
        next(it)
        t0 = time.thread_time()
        for _ in range(k):
            next(it)
        main.setdefault(depth, []).append((time.thread_time() - t0) / k)
        it.close()  # type: ignore[attr-defined]
    build, take = min(main[0]), min(main[2])
    figures["main_thread_ms_per_batch"] = {"build": build * 1e3, "take_from_prefetch": take * 1e3}
    if prefetch_pays(build, take):
        return 2, f"2: a free core builds batches; the main thread takes one in {take * 1e3:.3f} ms, builds it in " \
                  f"{build * 1e3:.3f} ms"
    return 0, f"0: taking a batch from the thread ({take * 1e3:.3f} ms) costs the main thread more than " \
              f"{PREFETCH_TAKE_SHARE:.0%} of building it ({build * 1e3:.3f} ms): too little to pay for a thread"


def prefetch_pays(build: float, take: float) -> bool:
    """Whether a prefetch thread takes enough off the main thread: taking a batch costs it at most
    PREFETCH_TAKE_SHARE of building one (seconds a batch, both measured on the main thread)."""
    return take <= PREFETCH_TAKE_SHARE * build


def plan_loader(source: Any, batch: int, device: torch.device, prefetch: int | str, gather_threads: int | str,
                store: str | None = None, fresh: bool = False) -> LoaderPlan:
    """The settings for `source`: the config's where it names them, the probe's (cached per host) for "auto"."""
    if prefetch != "auto" and gather_threads != "auto":
        plan = LoaderPlan(int(prefetch), int(gather_threads), native=native.load() is not None,
                          reasons={"prefetch": "set in the config", "gather_threads": "set in the config"})
        source.configure_gather(plan.gather_threads)
        return plan
    key, path = plan_key(source, batch, device), cache_path(store)
    plan = None if fresh else _cached(path, key)
    if plan is None:
        plan = measure(source, batch, device)
        _write(path, key, plan)
    else:
        source.configure_gather(plan.gather_threads, **copy_settings(plan.as_dict()))
    plan.figures["cache"] = str(path)
    if prefetch != "auto":
        plan.prefetch, plan.reasons["prefetch"] = int(prefetch), "set in the config"
    if gather_threads != "auto":
        plan.gather_threads, plan.reasons["gather_threads"] = int(gather_threads), "set in the config"
        source.configure_gather(plan.gather_threads, **copy_settings(plan.as_dict()))
    return plan


MAX_PREFETCH, MAX_AHEAD = 8, 64  # above anything the probe chooses (prefetch 0 or 2, ahead 0 or AHEAD)


def plan_problem(got: dict[str, Any]) -> str | None:
    """What makes a cached plan not one the probe writes on this host (None: nothing): gather threads outside
    1..usable cores, a prefetch depth outside 0..MAX_PREFETCH, windows ahead outside 0..MAX_AHEAD, page streams
    outside 0..MAX_LINES, flags that are not true/false, figures or reasons that are not tables."""
    def whole(k: str, lo: int, hi: int) -> str | None:
        v = got.get(k)
        return None if type(v) is int and lo <= v <= hi else f"{k} = {json.dumps(v)[:40]} is not {lo}..{hi}"

    why = (whole("gather_threads", 1, usable_cores()) or whole("prefetch", 0, MAX_PREFETCH)
           or whole("ahead", 0, MAX_AHEAD) or whole("lines", 0, MAX_LINES))
    if why:
        return why
    if got.get("stream") not in (None, True, False) or got.get("native") not in (True, False):
        return f"stream / native = {json.dumps([got.get('stream'), got.get('native')])[:60]} are not true or false"
    if not isinstance(got.get("figures", {}), dict) or not isinstance(got.get("reasons", {}), dict):
        return "figures / reasons are not tables"
    return None


def _cached(path: Path, key: str) -> LoaderPlan | None:
    got = _read(path).get(key)
    if not isinstance(got, dict):
        return None
    if why := plan_problem(got):
        log.warning("stride: %s: the cached loader plan's %s: measuring the loader again", path, why)
        return None
    try:
        return LoaderPlan(**{**got, "origin": "cache"})
    except TypeError:
        return None  # written by another layout: measure again
