"""Traces analysed together must be ranks of one run: refused, in one line naming the files, where they are not.

The analysis of several traces compares them rank against rank (stragglers, step-start lag): traces of
different runs would be compared as if they ran side by side. A single-process profile beside a rank of a
2-rank DDP profile recorded 25 minutes later gave "rank 1: step start lag 1486922035.2 us". Ranks of one run
agree on the world size their `distributedInfo` states (or none states one), hold distinct ranks below it, and
were recorded at the same time: their time ranges overlap (the profiler records the same steps on every rank).
A trace's `trace_id` is not compared: every rank of one run writes its own.

Two runs recorded at the same time pass all of that (the same world size, ranks 0 and 1, overlapping times), and
their metadata does not tell them apart either: Kineto writes the same `distributedInfo` and process-group config,
`host_name`, `deviceProperties` and `baseTimeNanoseconds` for every run of one script on one host, no master
address or port, and a `trace_id`, pid and `traceName` of its own for every rank. What does tell them apart is the
collectives: an all-reduce (all-gather, reduce-scatter, all-to-all, barrier) ends on no rank before every rank has
entered it. Ranks of one run meet in each of them (gloo's thread on a 2-core host: every matched all-reduce ended
0.25-25 ms after the other rank's began); rank 0 of one run beside rank 1 of another, both recorded over the same
seconds, had their i-th all-reduces end 0.87-2.5 s before the other's began (`collectives_meet`).

`stride profile` writes the run's id into every rank's trace (`stride_run_id`, one random id shared by the ranks
at the start). Where the traces carry one, it decides: different ids, or a stride trace beside one without, are two
runs, whatever their times and collectives say; one id is one run, whose ranks' clocks may then differ by more
than the slack below (hosts out of sync) without a refusal. That covers what the collectives cannot: two runs on
different hosts recorded less than a second apart, or runs without collectives.

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

from stride.profile.classify import ANNOTATION_CATS, OPERATOR_CATS, is_meeting_collective
from stride.profile.errors import TraceError
from stride.profile.trace_model import RankTrace, distributed_info

# Clocks of different hosts differ by their synchronisation error (NTP: milliseconds): ranges closer than this
# are taken to overlap. Traces of one run overlap by the profiled steps; runs minutes apart are far beyond it.
CLOCK_SLACK_US = 1e6
# One host, one clock: a collective cannot end on one rank before another rank entered it, so anything beyond the
# timestamps' own error is proof. 10 ms leaves room for that error (and for hosts that share a name).
SAME_HOST_SLACK_US = 1e4


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


RUN_ID_KEY = "stride_run_id"  # the trace's top-level key, written by stride.train.profiling


def _run_id(t: RankTrace) -> str | None:
    v = t.meta.get(RUN_ID_KEY)
    return v if isinstance(v, str) and v else None


def run_id_problem(traces: list[RankTrace]) -> tuple[str | None, bool]:
    """(what says the traces are of different runs by their stride run ids, or None; whether all carry one id)."""
    ids = {_name(t): _run_id(t) for t in traces}
    stated = {n: i for n, i in ids.items() if i is not None}
    if not stated:
        return None, False
    if len(stated) < len(ids):
        (with_name, with_id), without = next(iter(stated.items())), [n for n, i in ids.items() if i is None]
        return (f"{with_name} was written by `stride profile` (run id {with_id[:12]}), "
                f"{', '.join(without[:3])}{' ...' if len(without) > 3 else ''} carries no stride run id "
                "(another run's, or another tool's)"), False
    if len(set(stated.values())) > 1:
        by_id: dict[str, str] = {}
        for n, i in stated.items():
            by_id.setdefault(i, n)
        return ("their stride run ids differ: " + ", ".join(f"{n} is of run {i[:12]}" for i, n in by_id.items())
                + " (each `stride profile` run writes its own)"), False
    return None, True


def _name(t: RankTrace) -> str:
    """The path as given: two folders' `trace_rank0.json` would otherwise read as one file."""
    return str(t.path)


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
    why = None
    if not dup:
        why, one_id = run_id_problem(traces)
        why = why or _problem(traces, one_id)
    if why:
        raise TraceError(f"these traces are not of one run: {why}; analyse each run's traces on their own")
    dup = dup or copied_trace(traces)
    if dup:
        raise TraceError(f"one rank's trace is given twice: {dup}; analyse each rank's trace once")


def _problem(traces: list[RankTrace], one_id: bool = False) -> str | None:
    """World sizes and ranks always; times and collectives (evidence of one run) unless one run id proves it."""
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
    if one_id:
        return None
    ranges = {t.path: r for t in traces if (r := time_range(t)) is not None}
    if len(ranges) > 1:
        paths = list(ranges)
        latest = max(paths, key=lambda p: ranges[p][0])  # starts last
        earliest_end = min(paths, key=lambda p: ranges[p][1])  # ends first
        gap = ranges[latest][0] - ranges[earliest_end][1]
        if gap > CLOCK_SLACK_US and np.isfinite(gap):
            return (f"{latest} was recorded {_seconds(gap)} after {earliest_end} ended (their time ranges "
                    "do not overlap; the ranks of one run are profiled over the same steps)")
    return collectives_meet(traces)


def _meeting_collectives(t: RankTrace) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(starts, ends) in time order per name of the collectives every rank must enter (`is_meeting_collective`):
    gloo's host events on a CPU trace, NCCL's kernels on a GPU trace, on the profiler's clock."""
    base = t.meta.get("baseTimeNanoseconds")
    offset = base / 1e3 if type(base) is int and base > 0 else 0.0
    if t.has_device:
        ts, dur, names, keep = t.dev_ts, t.dev_dur, t.dev_name, np.ones(len(t.dev_ts), dtype=bool)
    else:
        ts, dur, names = t.host_ts, t.host_dur, t.host_name
        keep = np.isin(t.host_cat, t.cat_ids(OPERATOR_CATS | ANNOTATION_CATS))
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for i, n in enumerate(t.names):
        if not is_meeting_collective(n):
            continue
        m = keep & (names == i)
        if m.any():
            order = np.argsort(ts[m], kind="stable")
            out[n] = (ts[m][order] + offset, (ts[m] + dur[m])[order] + offset)
    return out


def _by_step(t: RankTrace, starts: np.ndarray) -> dict[int | None, np.ndarray]:
    """Indices of the collectives started within each profiler step of the trace (all of them, without steps)."""
    if not t.steps:
        return {None: np.arange(len(starts))}
    base = t.meta.get("baseTimeNanoseconds")
    offset = base / 1e3 if type(base) is int and base > 0 else 0.0
    return {s.number: np.flatnonzero((starts >= s.ts + offset) & (starts < s.end + offset)) for s in t.steps}


def collectives_meet(traces: list[RankTrace]) -> str | None:
    """Where two traces' collectives cannot be the same collectives, what says so; else None.

    Each trace is matched against the first: per profiler step both recorded and per collective name, the i-th of
    one with the i-th of the other, in steps where both count the same number (a step whose counts differ is
    skipped, not guessed at). A pair fails to meet when one rank's ended before the other's began, by more than the
    clock slack (SAME_HOST_SLACK_US on one host_name, else CLOCK_SLACK_US). The traces are refused when most of
    their matched pairs fail: a proof, not a guess, that they were not recorded by one job's ranks."""
    first, rest = traces[0], traces[1:]
    mine = _meeting_collectives(first)
    if not mine:
        return None
    for t in rest:
        theirs = _meeting_collectives(t)
        host_a, host_b = first.meta.get("host_name"), t.meta.get("host_name")
        slack = SAME_HOST_SLACK_US if isinstance(host_a, str) and host_a == host_b else CLOCK_SLACK_US
        margins: list[float] = []
        worst: tuple[float, str, int | None, int, bool] | None = None
        for name in sorted(set(mine) & set(theirs)):
            (sa, ea), (sb, eb) = mine[name], theirs[name]
            steps_a, steps_b = _by_step(first, sa), _by_step(t, sb)
            for step in sorted(set(steps_a) & set(steps_b), key=lambda k: -1 if k is None else k):
                ia, ib = steps_a[step], steps_b[step]
                if len(ia) != len(ib) or not len(ia):
                    continue
                # > 0: each ended after the other began (they met); < 0: one was over before the other began
                a_first = ea[ia] - sb[ib]  # < 0: over on the first trace's rank before the other's began
                m = np.minimum(a_first, eb[ib] - sa[ia])
                margins.extend(m.tolist())
                k = int(np.argmin(m))
                if worst is None or m[k] < worst[0]:
                    worst = (float(m[k]), name, step, k + 1, bool(a_first[k] <= m[k]))
        if margins and worst is not None and float(np.median(margins)) < -slack:
            gap, name, step, k, a_first = worst
            where = f" of step {step}" if step is not None else ""
            ended, began = (first, t) if a_first else (t, first)
            n_bad = sum(x < -slack for x in margins)
            return (f"the collectives of {first.path} and {t.path} do not meet: in {n_bad} of {len(margins)} matched "
                    f"collectives one rank's ended before the other's began ({name} #{k}{where}: on rank "
                    f"{ended.rank} {-gap / 1e3:.1f} ms before rank {began.rank}'s began), and a collective ends on "
                    "no rank before every rank has entered it: two runs recorded at the same time?")
    return None
