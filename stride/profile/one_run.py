"""Traces analysed together must be ranks of one run: refused, in one line naming the files, where they are not.

The analysis of several traces compares them rank against rank (stragglers, step-start lag): traces of
different runs would be compared as if they ran side by side. A single-process profile beside a rank of a
2-rank DDP profile recorded 25 minutes later gave "rank 1: step start lag 1486922035.2 us". Ranks of one run
agree on the world size their `distributedInfo` states (or none states one), hold distinct ranks below it, and
were recorded at the same time: their time ranges overlap (the profiler records the same steps on every rank).
A trace's `trace_id` is not compared: every rank of one run writes its own.

One rank's trace given twice is refused too (not merged): the same file (a symlink, a hard link, the path
twice) or a copy of it (the same host name, process ids and event times, which two ranks never share). A copy named
`*_rank1.json` beside `*_rank0.json` took its rank from the file name and was analysed as a second rank, with
identical rows and "no stragglers"; merging it instead would hide that the real rank 1 is missing.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np

from stride.profile.errors import TraceError
from stride.profile.trace_model import RankTrace, distributed_info

# Clocks of different hosts differ by their synchronisation error (NTP: milliseconds): ranges closer than this
# are taken to overlap. Traces of one run overlap by the profiled steps; runs minutes apart are far beyond it.
CLOCK_SLACK_US = 1e6


def _world_size(t: RankTrace) -> int | None:
    info = distributed_info(t.path, t.meta)  # a string that is not JSON was refused when the trace was read
    n = info.get("world_size") if isinstance(info, dict) else None
    return n if type(n) is int and n > 0 else None


def time_range(t: RankTrace) -> tuple[float, float] | None:
    """(first start, last end) of the trace's events in µs on the profiler's clock (`baseTimeNanoseconds`, where
    the trace states one, added: newer Kineto writes times relative to it)."""
    starts = [a.min() for a in (t.host_ts, t.dev_ts) if len(a)]
    ends = [(a + d).max() for a, d in ((t.host_ts, t.host_dur), (t.dev_ts, t.dev_dur)) if len(a)]
    if not starts:
        return None
    base = t.meta.get("baseTimeNanoseconds")
    offset = base / 1e3 if type(base) is int and base > 0 else 0.0
    return float(min(starts)) + offset, float(max(ends)) + offset


def _name(t: RankTrace) -> str:
    return t.path.name


def _seconds(us: float) -> str:
    s = us / 1e6
    return f"{s / 60:.1f} min" if s >= 120 else f"{s:.1f} s"


def _identity(t: RankTrace) -> tuple[Any, ...]:
    """What one process's trace is: its host, process ids, clock base and every kept event's times and name.
    Two ranks differ in process id or host, and their events in time; a copy of a trace does not."""
    h = hashlib.blake2b(digest_size=16)
    for a in (t.host_ts, t.host_dur, t.host_name, t.dev_ts, t.dev_dur, t.dev_name):
        h.update(np.ascontiguousarray(a).tobytes())
        h.update(b"|")
    h.update("\0".join(t.names).encode("utf-8", "surrogatepass"))
    return (repr(t.meta.get("host_name")), repr(t.meta.get("baseTimeNanoseconds")),
            tuple(sorted(map(repr, t.pids))), h.hexdigest())


def same_file(traces: list[RankTrace]) -> str | None:
    """Where one file is given twice (the path twice, a symlink or hard link to it), what says so; else None."""
    by_file: dict[tuple[int, int], RankTrace] = {}
    for t in traces:
        try:
            st = os.stat(t.path)
        except OSError:  # read a moment ago; gone now: nothing to compare
            continue
        first = by_file.setdefault((st.st_dev, st.st_ino), t)  # one device and inode: one file (os.path.samefile)
        if first is not t:
            if str(first.path) == str(t.path):
                return f"{t.path} is given twice"
            return f"{first.path} and {t.path} are one file (a link, or one file reached by two paths)"
    return None


def copied_trace(traces: list[RankTrace]) -> str | None:
    """Where two files hold one trace (a copy: the same host name, process ids and event times), what says so."""
    by_identity: dict[tuple[Any, ...], RankTrace] = {}
    for t in traces:
        first = by_identity.setdefault(_identity(t), t)
        if first is not t:
            return (f"{first.path} and {t.path} are copies of one trace (the same host name, process ids and event "
                    "times, which two ranks never share)")
    return None


def check_one_run(traces: list[RankTrace]) -> None:
    """Raise a TraceError (one line, naming the files) unless `traces` are each one rank's trace, given once, of
    one run. One file given twice is said first; a copy after the other checks, which name two files that claim
    one rank as such (a copy named `*_rank1.json` beside `*_rank0.json` passes those)."""
    if len(traces) < 2:
        return
    dup = same_file(traces)
    why = None if dup else _problem(traces)
    if why:
        raise TraceError(f"these traces are not of one run: {why}; analyse each run's traces on their own")
    dup = dup or copied_trace(traces)
    if dup:
        raise TraceError(f"one rank's trace is given twice: {dup}; analyse each rank's trace once")


def _problem(traces: list[RankTrace]) -> str | None:
    sizes: dict[str, Any] = {_name(t): _world_size(t) for t in traces}
    stated = {n: s for n, s in sizes.items() if s is not None}
    if stated and len(stated) < len(sizes):
        (with_name, with_size), without = next(iter(stated.items())), [n for n, s in sizes.items() if s is None]
        return (f"{with_name} is a rank of a run of world_size {with_size} (distributedInfo), "
                f"{', '.join(without[:3])}{' ...' if len(without) > 3 else ''} states no world size "
                "(a single-process profile?)")
    if len(set(stated.values())) > 1:
        by_size: dict[int, str] = {}
        for n, s in stated.items():
            by_size.setdefault(s, n)
        return "the world sizes differ: " + ", ".join(f"{n} says {s}" for s, n in sorted(by_size.items()))
    by_rank: dict[int, RankTrace] = {}
    for t in traces:
        if t.rank in by_rank:
            return f"{_name(t)} and {_name(by_rank[t.rank])} are both rank {t.rank} ({t.rank_source})"
        by_rank[t.rank] = t
        size = sizes[_name(t)]
        if size is not None and t.rank >= size:
            return f"{_name(t)} is rank {t.rank} ({t.rank_source}) of a run of world_size {size}"
    ranges = {t.path: r for t in traces if (r := time_range(t)) is not None}
    if len(ranges) > 1:
        paths = list(ranges)
        latest = max(paths, key=lambda p: ranges[p][0])  # starts last
        earliest_end = min(paths, key=lambda p: ranges[p][1])  # ends first
        gap = ranges[latest][0] - ranges[earliest_end][1]
        if gap > CLOCK_SLACK_US and np.isfinite(gap):
            return (f"{latest.name} was recorded {_seconds(gap)} after {earliest_end.name} ended (their time ranges "
                    "do not overlap; the ranks of one run are profiled over the same steps)")
    return None
