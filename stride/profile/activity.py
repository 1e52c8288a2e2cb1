"""What the device is doing, as merged interval sets: compute, communication, memory, other.

On a GPU trace the device is the accelerator and the sets come from kernels, copies and sets (kinds by
name, see `classify`). On a CPU-only trace the "device" is the host: communication is the union of host collectives
(gloo runs them on its own threads, c10d's calls block the calling thread) and compute the union of CPU
operators less, on each thread, the time that thread spends inside a collective (`host_compute`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stride.profile import intervals as iv
from stride.profile.classify import (
    ANNOTATION_CATS,
    COMM,
    COMPUTE,
    MEMORY,
    MEMORY_CATS,
    OPERATOR_CATS,
    RUNTIME_CATS,
    device_kind,
    is_host_comm,
)
from stride.profile.trace_model import RankTrace


@dataclass
class Activity:
    """Merged interval sets of one rank (µs); `kind` per device event for per-name tables."""

    on_gpu: bool
    compute: iv.Intervals
    comm: iv.Intervals
    memory: iv.Intervals
    other: iv.Intervals
    busy: iv.Intervals
    ev_ts: np.ndarray  # the events the sets were built from (device events, or host ops on CPU)
    ev_end: np.ndarray
    ev_name: np.ndarray
    ev_kind: np.ndarray
    ev_launch: np.ndarray  # host launch time of each device event (NaN where unknown or on CPU)
    ev_lane: np.ndarray  # stream (GPU) or thread (CPU) of each event: nesting happens within a lane
    sorted_ts: np.ndarray | None = None  # event starts in ascending order, and their launch times
    sorted_launch: np.ndarray | None = None

    def __post_init__(self) -> None:
        order = np.argsort(self.ev_ts, kind="stable")
        self.sorted_ts, self.sorted_launch = self.ev_ts[order], self.ev_launch[order]


def name_kinds(t: RankTrace, on_gpu: bool) -> np.ndarray:
    """Kind of each interned name (device kernel rules on GPU, host collective rule on CPU)."""
    if on_gpu:
        return np.array([device_kind(n) for n in t.names], dtype=np.int8)
    return np.array([COMM if is_host_comm(n) else COMPUTE for n in t.names], dtype=np.int8)


def launch_times(t: RankTrace) -> np.ndarray:
    """For each device event, the start of the host runtime call with the same correlation id (NaN if none)."""
    out = np.full(len(t.dev_ts), np.nan)
    rt = np.isin(t.host_cat, t.cat_ids(RUNTIME_CATS)) & (t.host_corr >= 0)
    if not rt.any() or len(out) == 0:
        return out
    corr, ts = t.host_corr[rt], t.host_ts[rt]
    order = np.argsort(corr, kind="stable")
    corr, ts = corr[order], ts[order]
    pos = np.searchsorted(corr, t.dev_corr)
    pos_c = np.minimum(pos, len(corr) - 1)
    hit = (t.dev_corr >= 0) & (corr[pos_c] == t.dev_corr)
    out[hit] = ts[pos_c[hit]]
    return out


def host_compute(ts: np.ndarray, end: np.ndarray, kind: np.ndarray, lane: np.ndarray) -> iv.Intervals:
    """Compute time of a CPU trace: on each thread, the union of its compute operators less the union of its
    collectives, then the union over threads.

    Host operators nest: DDP's reducer hook calls `c10d::allreduce_` from inside
    `autograd::engine::evaluate_function: AccumulateGrad`, so the thread spends that time in the collective,
    not computing. Only the same thread's collectives are taken out: gloo's own threads running the collective
    while the main thread computes is overlap, as a communication kernel on one stream beside a compute kernel
    on another is on a GPU (where one stream runs one kernel at a time, so nothing nests and nothing is taken out).
    """
    keep = (kind == COMPUTE) | (kind == COMM)
    order = np.flatnonzero(keep)[np.argsort(lane[keep], kind="stable")]  # events grouped by thread
    ts, end, kind, lane = ts[order], end[order], kind[order], lane[order]
    cuts = np.flatnonzero(np.diff(lane)) + 1
    parts_s, parts_e = [], []
    for a, b in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(lane)]]), strict=True):
        if b <= a:
            continue
        comp, comm = kind[a:b] == COMPUTE, kind[a:b] == COMM
        on = iv.subtract(iv.union(ts[a:b][comp], end[a:b][comp]), iv.union(ts[a:b][comm], end[a:b][comm]))
        parts_s.append(on[0])
        parts_e.append(on[1])
    if not parts_s:
        return np.zeros(0), np.zeros(0)
    return iv.union(np.concatenate(parts_s), np.concatenate(parts_e))


def build_activity(t: RankTrace) -> Activity:
    if t.has_device:
        kinds = name_kinds(t, True)[t.dev_name]
        cats = np.array(t.cats, dtype=object)[t.dev_cat] if len(t.cats) else np.array([], dtype=object)
        is_mem_cat = np.isin(t.dev_cat, t.cat_ids(MEMORY_CATS))
        kinds = np.where(is_mem_cat, MEMORY, kinds).astype(np.int8)
        is_sync = cats == "cuda_sync"  # a sync marks the host waiting, not device work
        keep = ~is_sync
        ts, end = t.dev_ts[keep], (t.dev_ts + t.dev_dur)[keep]
        name, kind = t.dev_name[keep], kinds[keep]
        launch = launch_times(t)[keep]
        lane = t.dev_stream[keep]
        on_gpu = True
    else:
        ops = np.isin(t.host_cat, t.cat_ids(OPERATOR_CATS | ANNOTATION_CATS))
        kinds_by_name = name_kinds(t, False)
        host_kind = kinds_by_name[t.host_name] if len(t.host_name) else np.zeros(0, dtype=np.int8)
        is_op = np.isin(t.host_cat, t.cat_ids(OPERATOR_CATS))
        # compute: CPU operators that are not collectives; comm: any host collective (op or annotation)
        keep = ops & ((is_op & (host_kind == COMPUTE)) | (host_kind == COMM))
        ts, end = t.host_ts[keep], (t.host_ts + t.host_dur)[keep]
        name, kind = t.host_name[keep], host_kind[keep]
        launch = np.full(len(ts), np.nan)
        lane = t.host_tid[keep]
        on_gpu = False

    def u(mask: np.ndarray) -> iv.Intervals:
        return iv.union(ts[mask], end[mask])

    compute = u(kind == COMPUTE) if on_gpu else host_compute(ts, end, kind, lane)
    return Activity(
        on_gpu=on_gpu,
        compute=compute, comm=u(kind == COMM), memory=u(kind == MEMORY),
        other=u((kind != COMPUTE) & (kind != COMM) & (kind != MEMORY)), busy=iv.union(ts, end),
        ev_ts=ts, ev_end=end, ev_name=name, ev_kind=kind, ev_launch=launch, ev_lane=lane,
    )
