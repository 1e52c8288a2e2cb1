"""Top kernels (GPU) or operators (CPU) by time inside the analysed windows, and the tiny-kernel figures.

Time per name is the sum of event durations (inclusive); on CPU traces, where operators nest
(`aten::linear` holds `aten::addmm`), the list is ranked by self time, the duration less that of the
direct children on the same thread. Launch delay is kernel start minus the start of its host launch
call, via correlation ids.
"""

from __future__ import annotations

import numpy as np

from stride.profile.activity import Activity
from stride.profile.classify import COMPUTE, KIND_NAMES, MEMORY
from stride.profile.windows import Window

TINY_US = 10.0  # a kernel shorter than this is dominated by launch cost on current GPUs
TINY_TIME_BOUND_PCT = 25.0  # tiny kernels taking a quarter of the kernel time set the step's pace


def _in_windows(act: Activity, windows: list[Window]) -> np.ndarray:
    """Indices, ascending, of the events overlapping some window (starting before its end, ending after its start).
    Each window reads only the events starting in [start - reach, end) by binary search over the starts, `reach`
    being the longest duration but for the LONG_EVENTS longest events, which are checked against each window apart:
    the verdict of every step asks for its own window, and a mask over all events per step made a trace of 30,000
    steps (1.7 M events, 235 MB) take 166 s, quadratic in the steps (outside audit of `stride analyze`). With the
    longest event as the reach, one long event (a collective's wait across the trace) made every step read again all
    the events that long before it (review of session 36's diff)."""
    if not windows or not len(act.ev_ts):
        return np.zeros(0, dtype=np.int64)
    order, starts, far, far_ts, far_end = act.start_order, act.sorted_ts, act.long_events, act.long_ts, act.long_end
    parts = []
    for w in windows:
        idx = order[np.searchsorted(starts, w.start - act.reach, side="left"):
                    np.searchsorted(starts, w.end, side="left")]
        parts.append(idx[act.ev_end[idx] > w.start])
        parts.append(far[(far_ts < w.end) & (far_end > w.start)])
    return np.unique(np.concatenate(parts))


def self_times(ts: np.ndarray, end: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """Duration minus the durations of direct children (events nested inside, on the same lane)."""
    dur = end - ts
    out = dur.copy()
    order = np.lexsort((-end, ts, lane))  # by lane, then start, parents (longer) before children
    stack: list[int] = []
    prev_lane = None
    for i in order.tolist():
        if lane[i] != prev_lane:
            stack, prev_lane = [], lane[i]
        while stack and ts[i] >= end[stack[-1]]:
            stack.pop()
        if stack:
            out[stack[-1]] -= dur[i]
        stack.append(i)
    return out


def top_kernels(act: Activity, names: list[str], windows: list[Window], k: int = 10) -> list[dict]:
    m = _in_windows(act, windows)
    if not len(m):
        return []
    nid, dur, kind = act.ev_name[m], act.ev_end[m] - act.ev_ts[m], act.ev_kind[m]
    delay = act.ev_ts[m] - act.ev_launch[m]
    uniq, inv = np.unique(nid, return_inverse=True)
    total = np.bincount(inv, weights=dur)
    count = np.bincount(inv)
    if act.on_gpu:
        self_total = None
        rank_by = total
    else:
        self_total = np.bincount(inv, weights=self_times(act.ev_ts[m], act.ev_end[m], act.ev_lane[m]))
        rank_by = self_total
    ok = ~np.isnan(delay)
    d_sum = np.bincount(inv[ok], weights=delay[ok], minlength=len(uniq))
    d_n = np.bincount(inv[ok], minlength=len(uniq))
    grand = float(rank_by.sum())
    out = []
    for i in np.argsort(-rank_by, kind="stable")[:k]:
        out.append({
            "name": names[int(uniq[i])],
            "kind": KIND_NAMES[int(kind[np.flatnonzero(inv == i)[0]])],
            "count": int(count[i]),
            "total_us": float(total[i]),
            "self_us": float(self_total[i]) if self_total is not None else None,
            "mean_us": float(total[i] / count[i]),
            "pct_of_kernel_time": 100.0 * float(rank_by[i]) / grand if grand > 0 else None,
            "launch_delay_us": float(d_sum[i] / d_n[i]) if d_n[i] else None,
        })
    return out


def tiny_kernels(act: Activity, windows: list[Window]) -> dict:
    """How much of the work runs in kernels shorter than TINY_US: GPU kernels by duration, or on a CPU
    trace the compute and bandwidth-bound operators by self time (an operator's own work and dispatch, without
    the operators it calls: a step of many small ops spends it in per-op overhead; not the collectives, nor the
    data loader's operators).

    `flagged`: more than half of >= 100 kernels are tiny. `dominant`: flagged, and the tiny ones take
    >= TINY_TIME_BOUND_PCT of the kernel time: the work is spread over so many small launches that
    their fixed cost (launch, dispatch, ramp-up), not arithmetic or bandwidth, sets the pace."""
    m = _in_windows(act, windows)
    if act.on_gpu:
        dur = act.ev_end[m] - act.ev_ts[m]
    else:
        work = (act.ev_kind[m] == COMPUTE) | (act.ev_kind[m] == MEMORY)
        dur = self_times(act.ev_ts[m], act.ev_end[m], act.ev_lane[m])[work]
    n = int(len(dur))
    tiny = dur < TINY_US
    time_pct = 100.0 * float(dur[tiny].sum()) / float(dur.sum()) if n and dur.sum() > 0 else None
    flagged = bool(n >= 100 and tiny.sum() / n > 0.5)
    return {
        "unit": "kernels" if act.on_gpu else "CPU operators (self time)",
        "threshold_us": TINY_US,
        "kernels": n,
        "count": int(tiny.sum()),
        "pct_of_kernels": 100.0 * float(tiny.sum()) / n if n else None,
        "pct_of_kernel_time": time_pct,
        "median_us": float(np.median(dur)) if n else None,
        "flagged": flagged,
        "dominant": bool(flagged and time_pct is not None and time_pct >= TINY_TIME_BOUND_PCT),
    }
