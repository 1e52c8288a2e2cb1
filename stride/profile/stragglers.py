"""Stragglers across ranks: the rank the others wait for in their collectives.

For every profiler step that all ranks recorded, the i-th collective of each rank (matched by order) of each name is
compared across ranks. Where the ranks share a clock (one `host_name`: one host, one clock) the comparison is of
absolute entry times: a collective ends on no rank before the last rank has entered it, so the rank that enters last
is the one the others wait for, and each other rank's wait is the time from its own entry to the last rank's (at most
its collective's duration). Offsets from each rank's own step start were used before, also on one clock: on a 2-rank
gloo run rank 1 entered the all-reduces 14-43 ms after rank 0 while rank 0 sat in them for 15-48 ms, yet rank 0 was
listed (its entry 1.4 ms later *within its own step*, which began 30 ms earlier) beside rank 1 (by step-start lag):
both flagged under contradictory measures (outside audit of `stride analyze`). Where the clocks differ (several
hosts), offsets from each rank's own step start are all there is (no clock alignment needed) and the report says so.

A rank's lag is the median over matched collectives of (its entry - the earliest rank's entry); it is listed where the
lag exceeds max(50 µs, 1% of the median step span). On one clock without collectives in common, the step-start lag
(absolute step starts) decides instead; with collectives it is shown as evidence only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stride.profile.classify import COMM, is_ddp_reducer, is_meeting_collective

ABSOLUTE = "absolute entry times (one host, one clock)"
FROM_STEP_START = "offsets from each rank's own step start (different hosts: clocks not aligned)"
STEP_START = "absolute step starts (one host, one clock; no collectives in common)"


@dataclass
class RankSteps:
    """What the straggler check needs of one rank."""

    rank: int
    host: str | None
    steps: dict[int, tuple[float, float]]  # step -> (window start, window end) on the device timeline
    host_step_start: dict[int, float]
    comm: dict[str, np.ndarray]  # collective name -> sorted start times
    comm_end: dict[str, np.ndarray] = field(default_factory=dict)  # name -> end times, in the order of `comm`


def rank_steps(rank: int, host: str | None, windows, host_steps, act, names: list[str]) -> RankSteps:
    m = act.ev_kind == COMM
    starts, ends, ids = act.ev_ts[m], act.ev_end[m], act.ev_name[m]
    # collectives only: DDP's reducer operators are communication time, but not collectives ranks meet in
    comm, comm_end = {}, {}
    for i in np.unique(ids):
        name = names[int(i)]
        if is_ddp_reducer(name):
            continue
        sel = ids == i
        order = np.argsort(starts[sel], kind="stable")
        comm[name], comm_end[name] = starts[sel][order], ends[sel][order]
    return RankSteps(
        rank=rank, host=host,
        steps={w.step: (w.start, w.end) for w in windows if w.step is not None},
        host_step_start={s.number: s.ts for s in host_steps},
        comm=comm, comm_end=comm_end,
    )


def one_clock(ranks: list[RankSteps]) -> bool:
    """All ranks name one host: their times are of one clock and can be compared as they are."""
    return len({r.host for r in ranks}) == 1 and ranks[0].host is not None


def find_stragglers(ranks: list[RankSteps]) -> list[dict]:
    """The ranks whose lag exceeds the threshold, most late first. On one clock the first carries the evidence: the
    other ranks' wait for it inside their collectives (`waiting_ranks`, per step)."""
    if len(ranks) < 2:
        return []
    common = sorted(set.intersection(*(set(r.steps) for r in ranks)))
    if not common:
        return []
    spans = [e - s for r in ranks for s, e in (r.steps[k] for k in common)]
    threshold = max(50.0, 0.01 * float(np.median(spans)))
    absolute = one_clock(ranks)
    lags: dict[int, list[float]] = {r.rank: [] for r in ranks}
    wait = {r.rank: 0.0 for r in ranks}  # time in meeting collectives before the last rank entered (one clock)
    in_coll = {r.rank: 0.0 for r in ranks}  # time in the matched meeting collectives
    names = sorted(set.intersection(*(set(r.comm) for r in ranks)))
    meeting = [n for n in names if is_meeting_collective(n)] or names
    for k in common:
        for name in names:
            entries, durs = [], []
            for r in ranks:
                s, e = r.steps[k]
                c, ce = r.comm[name], r.comm_end.get(name, r.comm[name])
                sel = (c >= s) & (c < e)
                entries.append(c[sel] if absolute else c[sel] - r.host_step_start.get(k, s))
                durs.append(ce[sel] - c[sel])
            n = min(len(o) for o in entries)
            if n == 0:
                continue
            mat = np.stack([o[:n] for o in entries])
            rel = mat - mat.min(axis=0)
            for r, row in zip(ranks, rel, strict=True):
                lags[r.rank].extend(row.tolist())
            if absolute and name in meeting:
                last = mat.max(axis=0)
                for r, row, d in zip(ranks, mat, durs, strict=True):
                    wait[r.rank] += float(np.minimum(np.maximum(last - row, 0.0), d[:n]).sum())
                    in_coll[r.rank] += float(d[:n].sum())
    start_lag: dict[int, float | None] = {r.rank: None for r in ranks}
    if absolute:
        per_step = np.array([[r.host_step_start.get(k, np.nan) for k in common] for r in ranks])
        rel = per_step - np.nanmin(per_step, axis=0)
        for r, row in zip(ranks, rel, strict=True):
            start_lag[r.rank] = float(np.nanmedian(row))
    with_collectives = any(lags.values())
    measure = (ABSOLUTE if absolute else FROM_STEP_START) if with_collectives else STEP_START
    out = []
    for r in ranks:
        lag = float(np.median(lags[r.rank])) if lags[r.rank] else None
        step_lag = start_lag[r.rank]
        decides = lag if with_collectives else step_lag
        if decides is not None and decides > threshold:
            out.append({
                "rank": r.rank,
                "collective_start_lag_us": lag,
                "step_start_lag_us": step_lag,
                "lag_measure": measure,
                "threshold_us": threshold,
                "steps": common,
            })
    out.sort(key=lambda d: -((d["collective_start_lag_us"] if with_collectives else d["step_start_lag_us"]) or 0.0))
    if out and absolute and with_collectives:
        top = out[0]
        n_steps = len(common)
        top["collective_us_per_step"] = in_coll[top["rank"]] / n_steps
        top["waiting_ranks"] = [
            {"rank": r.rank, "wait_us_per_step": wait[r.rank] / n_steps,
             "collective_us_per_step": in_coll[r.rank] / n_steps,
             "wait_pct_of_step": 100.0 * wait[r.rank] / sum(e - s for s, e in (r.steps[k] for k in common))}
            for r in ranks if r.rank != top["rank"] and wait[r.rank] / n_steps > threshold]
    return out
