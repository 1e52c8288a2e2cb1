"""One rank's trace reduced to compact arrays: device events, host events, profiler steps.

Built while the JSON streams past (see `json_stream`), keeping only the fields the analyses need as
typed arrays (8 bytes a number, names interned), so memory grows with the number of kept events and
not with the size of the JSON text.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stride.profile.classify import DEVICE_CATS, HOST_CATS, step_number
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

    @property
    def has_device(self) -> bool:
        return len(self.dev_ts) > 0

    def cat_ids(self, cats: frozenset[str]) -> np.ndarray:
        return np.array([i for i, c in enumerate(self.cats) if c in cats], dtype=np.int32)


class _Collector:
    """Per-event callback: keeps `X` events of the device and host categories as typed arrays."""

    def __init__(self) -> None:
        self.name_ids: dict[str, int] = {}
        self.cat_ids: dict[str, int] = {}
        self.tid_ids: dict[Any, int] = {}
        self.d = {k: array("d") for k in ("ts", "dur")}
        self.di = {k: array("q") for k in ("name", "cat", "stream", "corr")}
        self.h = {k: array("d") for k in ("ts", "dur")}
        self.hi = {k: array("q") for k in ("name", "cat", "tid", "corr")}
        self.steps: dict[int, Step] = {}
        self.fractional_ts = False
        self.n = 0

    def __call__(self, ev: dict) -> None:
        self.n += 1
        ts = ev.get("ts")
        if type(ts) is not int:
            self.fractional_ts = True
        if ev.get("ph") != "X":
            return
        cat = ev.get("cat")
        if cat in DEVICE_CATS:
            store, istore = self.d, self.di
        elif cat in HOST_CATS:
            store, istore = self.h, self.hi
        else:
            return
        dur = ev.get("dur", 0)
        if not isinstance(ts, int | float) or not isinstance(dur, int | float):
            return  # an `X` event without numeric times carries no interval
        name = ev.get("name", "")
        nid = self.name_ids.setdefault(name, len(self.name_ids))
        cid = self.cat_ids.setdefault(cat, len(self.cat_ids))
        args = ev.get("args") or {}
        corr = args.get("correlation", -1)
        store["ts"].append(ts)
        store["dur"].append(dur)
        istore["name"].append(nid)
        istore["cat"].append(cid)
        istore["corr"].append(corr if type(corr) is int else -1)
        if store is self.d:
            stream = args.get("stream", -1)
            istore["stream"].append(stream if type(stream) is int else -1)
        else:
            tid = ev.get("tid")
            istore["tid"].append(self.tid_ids.setdefault(tid, len(self.tid_ids)))
            if name.startswith("ProfilerStep"):
                num = step_number(name)
                if num is not None and num not in self.steps:
                    self.steps[num] = Step(num, float(ts), float(ts) + float(dur))


_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def _rank_of(path: Path, meta: dict[str, Any]) -> tuple[int, str]:
    info = meta.get("distributedInfo")
    if isinstance(info, str):  # some writers store it as a JSON string
        import json

        try:
            info = json.loads(info)
        except ValueError as exc:
            raise TraceError(f"{path}: 'distributedInfo' is a string that is not JSON: {exc}") from exc
    if isinstance(info, dict) and "rank" in info:
        rank = info["rank"]
        if type(rank) is not int or rank < 0:
            raise TraceError(f"{path}: distributedInfo.rank is {rank!r}, expected a non-negative integer")
        return rank, "distributedInfo"
    m = _RANK_IN_NAME.search(path.name)
    if m:
        return int(m.group(1)), "file name"
    return 0, "default"


def load_trace(path: str | Path) -> RankTrace:
    """Stream one trace file into a `RankTrace` (raises `TraceError` naming the file on bad input)."""
    p = Path(path)
    c = _Collector()
    meta = scan_trace(p, c)
    rank, source = _rank_of(p, meta)
    names = [""] * len(c.name_ids)
    for n, i in c.name_ids.items():
        names[i] = n
    cats = [""] * len(c.cat_ids)
    for n, i in c.cat_ids.items():
        cats[i] = n

    def f(a: array) -> np.ndarray:
        return np.frombuffer(a, dtype=np.float64) if len(a) else np.zeros(0)

    def i(a: array) -> np.ndarray:
        return np.frombuffer(a, dtype=np.int64) if len(a) else np.zeros(0, dtype=np.int64)

    return RankTrace(
        path=p, rank=rank, rank_source=source, meta=meta, names=names, cats=cats,
        dev_ts=f(c.d["ts"]), dev_dur=f(c.d["dur"]), dev_name=i(c.di["name"]), dev_cat=i(c.di["cat"]),
        dev_stream=i(c.di["stream"]), dev_corr=i(c.di["corr"]),
        host_ts=f(c.h["ts"]), host_dur=f(c.h["dur"]), host_name=i(c.hi["name"]), host_cat=i(c.hi["cat"]),
        host_tid=i(c.hi["tid"]), host_corr=i(c.hi["corr"]),
        steps=sorted(c.steps.values(), key=lambda s: s.ts), fractional_ts=c.fractional_ts, n_events=c.n,
    )
