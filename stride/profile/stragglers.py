"""Stragglers across ranks: ranks whose collectives start late within a step, or whose steps start late.

For every profiler step that all ranks recorded, the i-th collective of each rank (matched by order)
of each name is compared by its offset from that rank's own step start, which needs no clock alignment; a rank's
lag is the median over collectives of (its offset - the earliest rank's offset). Step-start lag
compares absolute step starts and is given only when all traces come from one host (one clock).
A rank is listed when its collective lag exceeds max(50 µs, 1% of the median step span).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stride.profile.classify import COMM, is_ddp_reducer


@dataclass
class RankSteps:
    """What the straggler check needs of one rank."""

    rank: int
    host: str | None
    steps: dict[int, tuple[float, float]]  # step -> (window start, window end) on the device timeline
    host_step_start: dict[int, float]
    comm: dict[str, np.ndarray]  # collective name -> sorted start times


def rank_steps(rank: int, host: str | None, windows, host_steps, act, names: list[str]) -> RankSteps:
    m = act.ev_kind == COMM
    starts, ids = act.ev_ts[m], act.ev_name[m]
    # collectives only: DDP's reducer operators are communication time, but not collectives ranks meet in
    comm = {names[int(i)]: np.sort(starts[ids == i]) for i in np.unique(ids) if not is_ddp_reducer(names[int(i)])}
    return RankSteps(
        rank=rank, host=host,
        steps={w.step: (w.start, w.end) for w in windows if w.step is not None},
        host_step_start={s.number: s.ts for s in host_steps},
        comm=comm,
    )


def find_stragglers(ranks: list[RankSteps]) -> list[dict]:
    if len(ranks) < 2:
        return []
    common = sorted(set.intersection(*(set(r.steps) for r in ranks)))
    if not common:
        return []
    spans = [e - s for r in ranks for s, e in (r.steps[k] for k in common)]
    threshold = max(50.0, 0.01 * float(np.median(spans)))
    lags: dict[int, list[float]] = {r.rank: [] for r in ranks}
    for k in common:
        for name in set.intersection(*(set(r.comm) for r in ranks)):
            offsets = []
            for r in ranks:
                s, e = r.steps[k]
                c = r.comm[name]
                offsets.append(c[(c >= s) & (c < e)] - r.host_step_start.get(k, s))
            n = min(len(o) for o in offsets)
            if n == 0:
                continue
            mat = np.stack([o[:n] for o in offsets])
            rel = mat - mat.min(axis=0)
            for r, row in zip(ranks, rel, strict=True):
                lags[r.rank].extend(row.tolist())
    one_clock = len({r.host for r in ranks}) == 1 and ranks[0].host is not None
    start_lag: dict[int, float | None] = {r.rank: None for r in ranks}
    if one_clock:
        per_step = np.array([[r.host_step_start.get(k, np.nan) for k in common] for r in ranks])
        rel = per_step - np.nanmin(per_step, axis=0)
        for r, row in zip(ranks, rel, strict=True):
            start_lag[r.rank] = float(np.nanmedian(row))
    out = []
    for r in ranks:
        lag = float(np.median(lags[r.rank])) if lags[r.rank] else None
        step_lag = start_lag[r.rank]
        if (lag is not None and lag > threshold) or (step_lag is not None and step_lag > threshold):
            out.append({
                "rank": r.rank,
                "collective_start_lag_us": lag,
                "step_start_lag_us": step_lag,
                "threshold_us": threshold,
                "steps": common,
            })
    return sorted(out, key=lambda d: -(d["collective_start_lag_us"] or 0.0))
