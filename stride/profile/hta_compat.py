"""Holistic Trace Analysis' definitions, for figures comparable with it number for number.

Re-implemented from HTA's documented behaviour (not its code): timestamps of traces with fractional
or missing `ts` are rounded inwards to whole µs (start up, end down); with two or more profiler steps
the last step is dropped by keeping host events that start before the last `ProfilerStep` and device
events whose correlation id matches one of them; the span is first device event to last; idle = span
minus the union of device events; compute = union of kernels HTA names compute; non-compute = the
rest, so communication overlapping compute counts as compute; overlap = |comm ∩ compute| / |comm|;
idle gaps are split per stream between consecutive kernels (host wait when the next kernel's launch
began after the previous kernel ended, kernel wait when the gap is under 30 µs).

HTA cannot analyse CPU-only traces; here they get the same rules over host operators (see `activity`),
cut to the steps the report lists (the last dropped as above), so span and operator table agree.
"""

from __future__ import annotations

import numpy as np

from stride.profile import intervals as iv
from stride.profile.activity import build_activity
from stride.profile.classify import COMM, COMPUTE, HOST_CATS, device_kind
from stride.profile.trace_model import RankTrace
from stride.profile.windows import analysed_windows

KERNEL_CATS = frozenset({"kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy", "mtia_ccp_events"})
CONSECUTIVE_KERNEL_DELAY_US = 30


def _round(ts: np.ndarray, dur: np.ndarray, on: bool) -> tuple[np.ndarray, np.ndarray]:
    if not on:
        return ts, ts + dur
    return np.ceil(ts), np.floor(ts + dur)


def hta_device_events(t: RankTrace, include_last_step: bool, n_step_names: int) -> dict:
    """HTA's filtered device events of one rank: start, end, name id, category id, stream, launch ts."""
    d_ts, d_end = _round(t.dev_ts, t.dev_dur, t.fractional_ts)
    h_ts, h_end = _round(t.host_ts, t.host_dur, t.fractional_ts)
    host_ok = np.isin(t.host_cat, t.cat_ids(HOST_CATS))
    sync_names = {i for i, n in enumerate(t.names) if n in ("Event Sync", "Context Sync")}
    is_dev = ((t.dev_stream >= 0) & (t.dev_corr >= 0)) | np.isin(t.dev_name, list(sync_names))
    if n_step_names >= 2:
        steps = np.array([s.ts for s in t.steps])
        step_ends = np.array([s.end for s in t.steps])
        if len(steps):
            ps, pe = _round(steps, step_ends - steps, t.fractional_ts)
            last_start, last_end = ps.max(), pe.max()
        else:
            last_start = h_ts[host_ok].min() if host_ok.any() else np.inf
            last_end = h_end[host_ok].max() if host_ok.any() else np.inf
        keep_host = host_ok & ((h_ts <= last_end) if include_last_step else (h_ts < last_start))
        corr = np.unique(t.host_corr[keep_host])
        keep_dev = is_dev & np.isin(t.dev_corr, corr)
    else:
        keep_host = host_ok
        keep_dev = is_dev
    # launch time: the kept host event with the same correlation id
    launch = np.full(len(d_ts), np.nan)
    hc = t.host_corr[keep_host & (t.host_corr >= 0)]
    hts = h_ts[keep_host & (t.host_corr >= 0)]
    if len(hc):
        o = np.argsort(hc, kind="stable")
        hc, hts = hc[o], hts[o]
        pos = np.minimum(np.searchsorted(hc, t.dev_corr), len(hc) - 1)
        hit = hc[pos] == t.dev_corr
        launch[hit] = hts[pos[hit]]
    k = keep_dev & (t.dev_stream != -1)
    return {"ts": d_ts[k], "end": d_end[k], "name": t.dev_name[k], "cat": t.dev_cat[k],
            "stream": t.dev_stream[k], "launch": launch[k]}


def hta_figures(t: RankTrace, include_last_step: bool = False, n_step_names: int | None = None) -> dict:
    """Temporal breakdown, overlap and idle split with HTA's definitions (percentages; µs totals)."""
    if n_step_names is None:
        n_step_names = len(t.steps)
    if not t.has_device:
        return _cpu_figures(t, include_last_step)
    ev = hta_device_events(t, include_last_step, n_step_names)
    if len(ev["ts"]) == 0:
        return _empty("no device events left after HTA's last-step filter")
    kinds = np.array([device_kind(n) for n in t.names], dtype=np.int8)[ev["name"]]
    return _figures(ev["ts"], ev["end"], kinds, _idle_split(t, ev))


def _figures(ts: np.ndarray, end: np.ndarray, kinds: np.ndarray, idle_split: dict | None) -> dict:
    merged = iv.union(ts, end)
    span = float(merged[1][-1] - merged[0][0])
    idle = span - iv.length(merged)
    comp = iv.union(ts[kinds == COMPUTE], end[kinds == COMPUTE])
    comm = iv.union(ts[kinds == COMM], end[kinds == COMM])
    compute = iv.length(comp)
    non_compute = span - compute - idle
    comm_len = iv.length(comm)
    overlap = iv.length(iv.intersect(comm, comp))

    def p(x: float) -> float | None:
        return 100.0 * x / span if span > 0 else None

    return {
        "span_us": span,
        "temporal_breakdown": {"idle_pct": p(idle), "compute_pct": p(compute), "non_compute_pct": p(non_compute),
                               "idle_us": idle, "compute_us": compute, "non_compute_us": non_compute},
        "comm_comp_overlap_pct": 100.0 * overlap / comm_len if comm_len > 0 else None,
        "idle_breakdown": idle_split,
    }


def _idle_split(t: RankTrace, ev: dict) -> dict:
    kernel_cat = np.isin(ev["cat"], t.cat_ids(KERNEL_CATS))
    tot = {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0}
    for s in np.unique(ev["stream"][kernel_cat]):
        m = kernel_cat & (ev["stream"] == s)
        o = np.argsort(ev["ts"][m], kind="stable")
        ts, end, launch = ev["ts"][m][o], ev["end"][m][o], ev["launch"][m][o]
        if len(ts) < 2:
            continue
        gap = ts[1:] - end[:-1]
        with np.errstate(invalid="ignore"):
            host = launch[1:] > end[:-1]
        kernel = ~host & (gap < CONSECUTIVE_KERNEL_DELAY_US)
        tot["host_wait"] += float(gap[host].sum())
        tot["kernel_wait"] += float(gap[kernel].sum())
        tot["other"] += float(gap[~host & ~kernel].sum())
    total = sum(tot.values())
    out: dict = {f"{k}_us": v for k, v in tot.items()}
    out.update({f"{k}_pct": (100.0 * v / total if total else None) for k, v in tot.items()})
    return out


def _cpu_figures(t: RankTrace, include_last_step: bool) -> dict:
    """HTA's rules over the CPU operators inside the steps the report lists (the last one dropped unless
    `include_last_step`, as for the operator table), each cut at the first step's start and the last one's end."""
    act = build_activity(t)
    windows = analysed_windows(t, act, drop_last_step=not include_last_step)
    if len(act.ev_ts) == 0 or not windows:
        return _empty("no CPU operators or device events in the trace")
    lo, hi = windows[0].start, windows[-1].end
    ts, end = np.maximum(act.ev_ts, lo), np.minimum(act.ev_end, hi)
    inside = end > ts
    if not inside.any():
        return _empty(f"no CPU operators inside the analysed steps ({', '.join(str(w.step) for w in windows)})")
    ts, end = _round(ts[inside], (end - ts)[inside], t.fractional_ts)
    end = np.maximum(end, ts)  # sub-µs host ops would round to negative length
    # HTA's rule: every operator that is not communication is compute (bandwidth-bound and data-loading ones too)
    kinds = np.where(act.ev_kind[inside] == COMM, COMM, COMPUTE).astype(np.int8)
    fig = _figures(ts, end, kinds, None)
    fig["note"] = "CPU-only trace: HTA itself cannot analyse it; HTA's rules applied to CPU operators"
    return fig


def _empty(why: str) -> dict:
    return {"span_us": 0.0, "temporal_breakdown": {"idle_pct": None, "compute_pct": None, "non_compute_pct": None},
            "comm_comp_overlap_pct": None, "idle_breakdown": None, "note": why}
