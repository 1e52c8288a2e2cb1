"""One rank's trace reduced to compact arrays: device events, host events, profiler steps.

Built while the JSON streams past (see `json_stream`), keeping only the fields the analyses need as
typed arrays (8 bytes a number, names interned), so memory grows with the number of kept events and
not with the size of the JSON text.
"""

from __future__ import annotations

import itertools
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stride.profile.classify import DEVICE_CATS, HOST_CATS, RUNTIME_CATS, step_number
from stride.profile.errors import TraceError
from stride.profile.json_stream import scan_trace


@dataclass
class Step:
    """One `ProfilerStep#N` annotation on the host (times in µs)."""

    number: int
    ts: float
    end: float


@dataclass
class RankTrace:
    """Arrays of one trace; times in microseconds as Kineto writes them (also for `displayTimeUnit: ns`)."""

    path: Path
    rank: int
    rank_source: str  # "distributedInfo", "file name" or "default"
    meta: dict[str, Any]
    names: list[str]
    cats: list[str]
    dev_ts: np.ndarray
    dev_dur: np.ndarray
    dev_name: np.ndarray
    dev_cat: np.ndarray
    dev_stream: np.ndarray
    dev_corr: np.ndarray
    host_ts: np.ndarray
    host_dur: np.ndarray
    host_name: np.ndarray
    host_cat: np.ndarray
    host_tid: np.ndarray
    host_corr: np.ndarray
    steps: list[Step] = field(default_factory=list)
    fractional_ts: bool = False  # some event has a float or missing `ts` (HTA then rounds to whole µs)
    n_events: int = 0
    pids: frozenset = frozenset()  # `pid`s of the kept events: with host and times, one process's trace
    malformed: dict[str, int] = field(default_factory=dict)  # events left out: {"ph is a list": 3, ...}
    malformed_first: str | None = None  # the first of them: "traceEvents[7]: ph is a list, not a string"
    duplicates: int = 0  # exact copies of a kept complete event, dropped (`_drop_duplicates`)
    dev_device: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # device index, -1: unknown

    def malformed_summary(self) -> dict[str, Any]:
        """What `stride analyze` reports of the events it left out as malformed (count 0: none)."""
        return {"count": sum(self.malformed.values()), "of": self.n_events, "reasons": dict(self.malformed),
                "first": self.malformed_first}

    def duplicates_summary(self) -> dict[str, Any]:
        """What `stride analyze` reports of the exact duplicate events it dropped (count 0: none)."""
        return {"count": self.duplicates, "of": self.n_events}

    @property
    def has_device(self) -> bool:
        return len(self.dev_ts) > 0

    def cat_ids(self, cats: frozenset[str]) -> np.ndarray:
        return np.array([i for i, c in enumerate(self.cats) if c in cats], dtype=np.int32)


def _json_type(v: Any) -> str:
    """A JSON value's type in words: 'a list', 'an object', 'a number', 'null'."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    return {str: "a string", int: "a number", float: "a number", list: "a list", dict: "an object"}.get(type(v),
                                                                                                   type(v).__name__)


# Events that are not well-formed (a `ph` that is not a string, a complete event's `name`, `cat` or thread id of
# another JSON type, `args` that is not an object) cannot be analysed and are left out, counted by reason. Kineto and
# Chrome never write such events, so they mean a damaged or hand-edited trace, and what one held is unknown (any
# operator, any share of a step). Before, they were dropped without a word (outside audit 14, M5: one event in 7
# moved matmul/conv from 28.2 % to 36.5 % of the step, exit 0). Above MALFORMED_MAX of a trace's events it is
# refused; up to it the report says how many were left out and why (`malformed_events`). Measured on the quick-start
# CPU trace (9,539 events, 8 random draws each): replacing 1 % of the events moved no share by more than 0.8 points
# (2 %: 1.7, 5 %: 2.2, 1 in 7: 6.3) and changed no verdict.
MALFORMED_MAX = 0.01


class _Collector:
    """Batch callback: keeps `X` events of the device and host categories, six numbers each (a device event seven).

    A device row is (ts, dur, name id, category id, stream, correlation, device); a host row is (ts, dur,
    name id, category id, thread id, correlation). Ids and correlations are exact in float64. Malformed
    events are counted by reason in `malformed` and left out (MALFORMED_MAX).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name_ids: dict[str, int] = {}
        self.cat_ids: dict[str, int] = {}
        self.tid_ids: dict[Any, int] = {}
        self.dev = array("d")
        self.host = array("d")
        self.dev_key = array("q")  # one hash per kept event of everything it holds (`_drop_duplicates`)
        self.host_key = array("q")
        self.profiler_ranges = 0  # CUPTI range-profiler events (`cuda_profiler_range`): a GPU run's
        self.no_cat = 0  # complete events without `cat`, and the first of them (index, event)
        self.no_cat_first: tuple[int, dict] | None = None
        self.steps: dict[int, Step] = {}
        self.fractional_ts = False
        self.n = 0
        self.pids: set[int | str] = set()
        self.malformed: dict[str, int] = {}
        self.malformed_first: str | None = None

    def __call__(self, batch: list[dict]) -> None:
        first = self.n
        self.n += len(batch)
        names, cats, tids = self.name_ids, self.cat_ids, self.tid_ids
        dev_ext, host_ext = self.dev.extend, self.host.extend
        pids = self.pids
        frac = self.fractional_ts
        for k, ev in enumerate(batch):
            ts = ev.get("ts")
            if not frac and type(ts) is not int:
                frac = True
            ph = ev.get("ph")
            if type(ph) is not str:
                self.left_out(first + k, ev, "ph", ph)
                continue
            if ph != "X":
                continue
            dur = ev.get("dur", 0)
            if type(ts) not in (int, float) or type(dur) not in (int, float):
                self.bad_times(first + k, ev)
            cat = ev.get("cat")
            if type(cat) is not str:
                if cat is None:  # no category: another tool's event, or a Kineto event stripped of it (`load_trace`)
                    self.no_cat += 1
                    if self.no_cat_first is None:
                        self.no_cat_first = (first + k, ev)
                else:
                    self.left_out(first + k, ev, "cat", cat)
                continue
            if cat in DEVICE_CATS:
                is_dev = True
            elif cat in HOST_CATS:
                is_dev = False
            else:
                if cat == "cuda_profiler_range":
                    self.profiler_ranges += 1
                continue
            if "dur" not in ev:  # no interval: a kernel without one was read as 0 µs long, its time lost (exit 0)
                self.bad_times(first + k, ev)
            name = ev.get("name")
            args = ev.get("args")
            tid = ev.get("tid")
            if type(name) is not str:  # missing too: a kernel without a name cannot be classified or listed
                self.left_out(first + k, ev, "name", name)
                continue
            if args is not None and type(args) is not dict:
                self.left_out(first + k, ev, "args", args)
                continue
            if not is_dev and type(tid) not in (int, float, str):  # missing too: the thread decides nesting
                self.left_out(first + k, ev, "tid", tid)
                continue
            pid = ev.get("pid")
            if type(pid) in (int, str):
                pids.add(pid)
            key = hash((name, ts, dur, pid, tid, cat, repr(args)))
            nid = names.get(name)
            if nid is None:
                nid = names[name] = len(names)
            cid = cats.get(cat)
            if cid is None:
                cid = cats[cat] = len(cats)
            args = args or {}
            corr = args.get("correlation", -1)
            if type(corr) is not int:
                corr = -1
            if is_dev:
                stream = args.get("stream", -1)
                device = args.get("device", pid)  # Kineto: the device index, also the device events' pid
                dev_ext((ts, dur, nid, cid, stream if type(stream) is int else -1, corr,
                         device if type(device) is int and device >= 0 else -1))
                self.dev_key.append(key)
            else:
                t_id = tids.get(tid)
                if t_id is None:
                    t_id = tids[tid] = len(tids)
                host_ext((ts, dur, nid, cid, t_id, corr))
                self.host_key.append(key)
                if name.startswith("ProfilerStep"):
                    num = step_number(name)
                    if num is not None and num not in self.steps:
                        self.steps[num] = Step(num, float(ts), float(ts) + float(dur))
        self.fractional_ts = frac

    def left_out(self, index: int, ev: dict, key: str, value: Any) -> None:
        """Count a malformed event (its `key` has the wrong JSON type) and keep the first as an example."""
        why = f"{key} is {_json_type(value)}" if key in ev else f"{key} is missing"
        self.malformed[why] = self.malformed.get(why, 0) + 1
        if self.malformed_first is None:
            name = ev.get("name")
            named = f" (name {name[:60]!r})" if isinstance(name, str) else ""
            expected = "an object" if key == "args" else "a number or a string" if key == "tid" else "a string"
            self.malformed_first = f"traceEvents[{index}]{named}: {why}, not {expected}"

    def bad_times(self, index: int, ev: dict) -> None:
        """A complete event whose ts or dur is not a number has no interval: refused (not dropped), as a
        negative dur is, so that a trace of such events is not analysed as an empty one. A missing dur too, on the
        events stride reads: Kineto writes one on every complete event, and read as 0 a kernel's time vanished from
        the step (compute 93.3 % of a step its kernels kept busy 95 %, outside audit)."""
        field = "ts" if type(ev.get("ts")) not in (int, float) else "dur"
        what = f"is {ev[field]!r}"[:60] + ", not a number of microseconds" if field in ev else "is missing"
        raise TraceError(f"{self.path}: traceEvents[{index}] (name {str(ev.get('name', '?'))[:60]!r}): "
                         f"{field} {what}")


_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def distributed_info(path: Path, meta: dict[str, Any]) -> Any:
    """The trace's `distributedInfo` (rank, world size, backend), parsed where a writer stored it as a JSON string;
    a TraceError naming the file where that string is not JSON."""
    info = meta.get("distributedInfo")
    if isinstance(info, str):  # some writers store it as a JSON string
        import json

        try:
            info = json.loads(info)
        except ValueError as exc:
            raise TraceError(f"{path}: 'distributedInfo' is a string that is not JSON: {exc}") from exc
    return info


def _rank_of(path: Path, meta: dict[str, Any]) -> tuple[int, str]:
    info = distributed_info(path, meta)
    if isinstance(info, dict) and "rank" in info:
        rank = info["rank"]
        if type(rank) is not int or rank < 0:
            raise TraceError(f"{path}: distributedInfo.rank is {rank!r}, expected a non-negative integer")
        return rank, "distributedInfo"
    m = _RANK_IN_NAME.search(path.name)
    if m:
        return int(m.group(1)), "file name"
    return 0, "default"


def _drop_duplicates(rows: np.ndarray, keys: array) -> tuple[np.ndarray, int]:
    """`rows` without exact copies of an earlier row's event (the same name, ts, dur, pid, tid, category and args:
    the 64-bit hash of all of them), and how many were dropped. A trace with every event twice doubled every count
    and total (NCCL SendRecv 396 -> 792 ms, an annotation's share 37.7% -> 75.5%) without a word; real traces hold
    events alike in all but their args (Kineto's zero-length `cudaEventQuery` calls, with their own correlation ids),
    which are kept."""
    if len(keys) < 2:
        return rows, 0
    k = np.frombuffer(keys, dtype=np.int64)
    _, first = np.unique(k, return_index=True)
    if len(first) == len(k):
        return rows, 0
    keep = np.zeros(len(k), dtype=bool)
    keep[first] = True
    return rows[keep], int(len(k) - len(first))


_LAUNCH_CALL = re.compile(r"Launch|Memcpy|Memset")  # a runtime call that puts work on the device


def _gpu_without_kernels(p: Path, names: list[str], cats: list[str], host: np.ndarray, ranges: int) -> None:
    """A trace with no device events whose host launched kernels (CUDA runtime calls) or holds CUPTI range-profiler
    events is a GPU run recorded without its kernel timeline: refused. Read as a CPU trace, its runtime calls blocked
    on the GPU were "compute-bound, matmul/conv 60%" (HTA's cupti_profiler sample: 1,862 runtime calls, no kernel)."""
    runtime = {i for i, c in enumerate(cats) if c in RUNTIME_CATS}
    on_rt = np.isin(host[:, 3].astype(np.int64), list(runtime)) if runtime and len(host) else np.zeros(0, bool)
    launches = sum(1 for i in host[on_rt, 2].astype(np.int64) if _LAUNCH_CALL.search(names[i])) if on_rt.any() else 0
    if not launches and not ranges:
        return
    raise TraceError(f"{p}: a GPU run without kernel events: {int(on_rt.sum()):,} CUDA runtime calls ({launches:,} "
                     f"kernel launches or copies) and {ranges:,} cuda_profiler_range events, but no kernel, copy or "
                     "set on a device timeline (CUPTI range-profiler mode records counters per range, not kernels): "
                     "its host times are calls waiting on the GPU, not CPU work, so no CPU verdict is given; refused "
                     "(profile with torch.profiler activities=[CPU, CUDA] for the kernel timeline)")


MAX_US = float(2**53)  # µs (285 years): beyond, a time is not a trace's and float64 no longer counts whole µs


def _check_times(path: Path, what: str, rows: np.ndarray, names: list[str]) -> None:
    """Event times are finite, within MAX_US, and durations are not negative (NaN, 1e999, 1e300 are refused); no
    time is negative: torch.profiler (Kineto) writes µs since the epoch or since a base it takes before the trace,
    and clamps a time that would fall a few ns before that base to 0 ("Chrome trace and json processing will throw a
    parser error"), so a negative ts is a trace whose times were changed (negated: a trace mirrored in time was
    analysed as steps 7, 6, 5 and "host-bound, 72 % idle", outside audit)."""
    ts, dur = rows[:, 0], rows[:, 1]
    bad = ~(np.abs(ts) <= MAX_US) | ~((dur >= 0) & (dur <= MAX_US))
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        # an epoch time in ns (1.7e18) passes 2^53 µs; one in µs (1.7e15) does not: say what it likely is
        ns = " (nanoseconds since the epoch? trace times are microseconds)" if 1e17 < abs(float(ts[k])) < 1e20 else ""
        raise TraceError(f"{path}: a {what} event (name {names[int(rows[k, 2])][:60]!r}) has ts={float(ts[k])!r}, "
                         f"dur={float(dur[k])!r}: times must be finite numbers of microseconds up to {MAX_US:.0f} "
                         f"and durations >= 0{ns}")
    negative = ts < 0
    if negative.any():
        k = int(np.flatnonzero(negative)[0])
        raise TraceError(f"{path}: a {what} event (name {names[int(rows[k, 2])][:60]!r}) has ts={float(ts[k])!r}: a "
                         f"profiler trace's times are never negative (they count microseconds from a base before the "
                         f"trace), so this trace's times were changed (negated, mirrored?); refused")


STEP_OVERLAP_US = 1.0  # ProfilerStep#N ends before #N+1 starts (one record_function exits, the next enters); 1 µs
# of overlap is allowed for a writer that rounds ts and dur each to whole µs (none of ../shared/traces overlaps)


def _check_steps(path: Path, steps: list[Step]) -> None:
    """The host's ProfilerStep intervals, in time order, are numbered upwards and do not overlap: each is one call of
    `prof.step()` to the next. A trace whose steps run backwards (7 before 6 before 5: a trace mirrored in time) or
    overlap each other has no step windows to analyse; it is refused, naming the two steps."""
    for a, b in itertools.pairwise(steps):
        if b.number < a.number:
            raise TraceError(f"{path}: ProfilerStep#{b.number} (ts={b.ts!r}) comes after ProfilerStep#{a.number} "
                             f"(ts={a.ts!r}): its profiler steps run backwards in time (the trace's times were "
                             f"changed: mirrored?); refused")
        if a.end - b.ts > STEP_OVERLAP_US:
            raise TraceError(f"{path}: ProfilerStep#{a.number} [{a.ts!r}, {a.end!r}] overlaps ProfilerStep#{b.number} "
                             f"[{b.ts!r}, {b.end!r}] by {a.end - b.ts:g} µs: a profiler step ends before the next "
                             f"begins, so the trace's times were changed; refused")


def load_trace(path: str | Path) -> RankTrace:
    """Stream one trace file into a `RankTrace` (raises `TraceError` naming the file on bad input)."""
    p = Path(path)
    c = _Collector(p)
    meta = scan_trace(p, c)
    rank, source = _rank_of(p, meta)
    names = [""] * len(c.name_ids)
    for n, i in c.name_ids.items():
        names[i] = n
    cats = [""] * len(c.cat_ids)
    for n, i in c.cat_ids.items():
        cats[i] = n

    dev = np.frombuffer(c.dev, dtype=np.float64).reshape(-1, 7) if len(c.dev) else np.zeros((0, 7))
    host = np.frombuffer(c.host, dtype=np.float64).reshape(-1, 6) if len(c.host) else np.zeros((0, 6))
    dev, dup_dev = _drop_duplicates(dev, c.dev_key)
    host, dup_host = _drop_duplicates(host, c.host_key)

    if c.no_cat and len(dev) + len(host):
        # Kineto gives every complete event a category: beside its events, one without is damaged, not another tool's
        # (kernels stripped of theirs vanished without a word: "host-bound, idle 99.9%", outside audit)
        index, ev = c.no_cat_first
        first_bad = c.malformed_first
        c.left_out(index, ev, "cat", None)
        c.malformed["cat is missing"] += c.no_cat - 1
        c.malformed_first = first_bad or c.malformed_first
    bad = sum(c.malformed.values())
    if bad > MALFORMED_MAX * c.n:
        reasons = ", ".join(f"{why}: {n}" for why, n in c.malformed.items())
        raise TraceError(f"{p}: {bad:,} of its {c.n:,} events ({100 * bad / c.n:.1f}%) are malformed ({reasons}; "
                         f"first: {c.malformed_first}): what they held is unknown, so the figures would not be the "
                         f"trace's; refused above {100 * MALFORMED_MAX:g}% of the events")
    if len(dev) + len(host) == 0:
        raise TraceError(f"{p}: no complete events (ph 'X') of the categories stride reads (CPU operators, "
                         f"annotations, runtime calls, kernels) among its {c.n} events: nothing to analyse")
    for what, rows in (("device", dev), ("host", host)):
        _check_times(p, what, rows, names)
    if not len(dev):
        _gpu_without_kernels(p, names, cats, host, c.profiler_ranges)
    steps = sorted(c.steps.values(), key=lambda s: s.ts)
    _check_steps(p, steps)

    def i(col: np.ndarray) -> np.ndarray:
        return col.astype(np.int64)

    return RankTrace(
        path=p, rank=rank, rank_source=source, meta=meta, names=names, cats=cats,
        dev_ts=dev[:, 0].copy(), dev_dur=dev[:, 1].copy(), dev_name=i(dev[:, 2]), dev_cat=i(dev[:, 3]),
        dev_stream=i(dev[:, 4]), dev_corr=i(dev[:, 5]), dev_device=i(dev[:, 6]),
        host_ts=host[:, 0].copy(), host_dur=host[:, 1].copy(), host_name=i(host[:, 2]), host_cat=i(host[:, 3]),
        host_tid=i(host[:, 4]), host_corr=i(host[:, 5]),
        steps=steps, fractional_ts=c.fractional_ts, n_events=c.n,
        pids=frozenset(c.pids), malformed=dict(c.malformed), malformed_first=c.malformed_first,
        duplicates=dup_dev + dup_host,
    )
