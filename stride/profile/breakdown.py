"""Temporal breakdown, communication/computation overlap and idle split of one analysed window.

Definitions (stride's own; `hta_compat` has HTA's): over a window of span S, busy = union of all
device work, compute = union of compute work, exposed communication = communication not under
compute, exposed memory = copies/sets under neither, other busy = the rest of busy (GPU kernels of no kind).
compute + exposed comm + exposed memory + other busy + idle = 100 %, and non_compute = busy - compute.
Overlap = |comm ∩ compute| / |comm| (null without communication). Where concurrent communication does not count
as overlap (`overlap_counted` False: a CPU host with no core free for the collectives' thread, `run_meta`), overlap
is 0, all communication is exposed, and compute is the compute not under communication.
Idle gaps on a GPU are split by the kernel that ends each gap: host_wait if the host had not yet
launched it when the gap began (the device was starved by the CPU), kernel_wait if it was launched
and the gap is under `kernel_wait_us` (launch latency), other otherwise; gaps during a data-loading
annotation are data_wait. On CPU traces a gap is data_wait or other.

CPU traces (see `activity`): compute is the own time of matmul/conv/attention, wrapper, unrecognised and compiled
operators, memory that of bandwidth-bound operators (so exposed_memory_pct is bandwidth-bound operator time not
under compute or communication), and only compute hides communication: a bandwidth-bound operator under a collective
is communication time, as a copy under an all-reduce is on a GPU (the step waits on the collective, and gloo's
reduction moves memory itself); before, it counted as neither. The data loader's operators on the training thread
are not device work: the step waits for data while they run, so their time is idle, inside the data annotation,
and lands in data_wait. Without any data-loading annotation in a CPU trace data wait is not measured: null, not 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stride.profile import intervals as iv
from stride.profile.activity import Activity
from stride.profile.windows import Window

KERNEL_WAIT_US = 30.0  # HTA's default consecutive-kernel delay


@dataclass
class Times:
    """Absolute times (µs) of one or more windows; added up across steps."""

    span: float = 0.0
    busy: float = 0.0
    compute: float = 0.0
    comm: float = 0.0
    comm_concurrent: float = 0.0  # communication under compute, whether or not it counts as overlapped
    comm_exposed: float = 0.0
    comm_overlapped: float = 0.0
    memory_exposed: float = 0.0
    host_wait: float = 0.0
    kernel_wait: float = 0.0
    data_wait: float = 0.0
    idle_other: float = 0.0
    idle_unknown_launch: float = 0.0  # GPU: idle (outside data loading) ending at a kernel whose launch is unknown
    # CPU traces: the time (union over threads) whose innermost operator is of each class (`activity.op_classes`)
    op_math: float = 0.0
    op_memory: float = 0.0
    op_other: float = 0.0
    op_compiled: float = 0.0
    op_data: float = 0.0
    op_in_compiled: float = 0.0  # inside compiled regions or inductor kernels, whatever runs there

    def __iadd__(self, o: Times) -> Times:
        for k in self.__dataclass_fields__:
            setattr(self, k, getattr(self, k) + getattr(o, k))
        return self

    @property
    def idle(self) -> float:
        return max(self.span - self.busy, 0.0)


def window_times(act: Activity, w: Window, data_spans: iv.Intervals, overlap_counted: bool = True) -> Times:
    """`overlap_counted` False: communication under compute is exposed, not overlapped (a CPU host with no core
    free for the collectives' thread), and that time is communication's, not compute's."""
    lo, hi = w.start, w.end
    busy = iv.clip(act.busy, lo, hi)
    comp = iv.clip(act.compute, lo, hi)
    comm = iv.clip(act.comm, lo, hi)
    mem = iv.clip(act.memory, lo, hi)
    t = Times(span=w.span, busy=iv.length(busy), compute=iv.length(comp), comm=iv.length(comm))
    t.comm_concurrent = iv.length(iv.intersect(comm, comp))
    if overlap_counted or act.on_gpu:
        t.comm_overlapped = t.comm_concurrent
    else:
        t.compute -= t.comm_concurrent
    t.comm_exposed = t.comm - t.comm_overlapped
    cc = iv.union(np.concatenate([comp[0], comm[0]]), np.concatenate([comp[1], comm[1]]))
    t.memory_exposed = iv.subtract_length(mem, cc)
    _split_idle(act, busy, lo, hi, data_spans, t)
    if act.op_classes is not None:
        c = act.op_classes
        t.op_math, t.op_memory = iv.length(iv.clip(c["math"], lo, hi)), iv.length(iv.clip(c["bandwidth"], lo, hi))
        t.op_other, t.op_compiled = iv.length(iv.clip(c["other"], lo, hi)), iv.length(iv.clip(c["compiled"], lo, hi))
        t.op_data = iv.length(iv.clip(c["data"], lo, hi))
        t.op_in_compiled = iv.length(iv.clip(c["in_compiled"], lo, hi))
    return t


def _split_idle(act: Activity, busy: iv.Intervals, lo: float, hi: float, data: iv.Intervals, t: Times) -> None:
    # gaps of the busy set inside [lo, hi)
    gs = np.concatenate([[lo], busy[1]])
    ge = np.concatenate([busy[0], [hi]])
    keep = ge > gs
    gs, ge = gs[keep], ge[keep]
    if len(gs) == 0:
        return
    in_data = iv.intersect((gs, ge), iv.clip(data, lo, hi))
    data_len = iv.length(in_data)
    t.data_wait += data_len
    # per-gap time outside data loading
    rest = (ge - gs) - _per_gap_overlap(gs, ge, in_data)
    if not act.on_gpu:
        t.idle_other += float(rest.sum())
        return
    # the device event that starts where each gap ends (the kernel the device waited for)
    j = np.searchsorted(act.sorted_ts, ge, side="left")
    has_next = j < len(act.sorted_ts)
    launch = np.full(len(gs), np.nan)
    launch[has_next] = act.sorted_launch[j[has_next]]
    t.idle_unknown_launch += float(rest[has_next & np.isnan(launch)].sum())
    host_wait = has_next & ~np.isnan(launch) & (launch > gs)
    kernel_wait = has_next & ~host_wait & ((ge - gs) < KERNEL_WAIT_US)
    t.host_wait += float(rest[host_wait].sum())
    t.kernel_wait += float(rest[kernel_wait].sum())
    t.idle_other += float(rest[~host_wait & ~kernel_wait].sum())


def _per_gap_overlap(gs: np.ndarray, ge: np.ndarray, parts: iv.Intervals) -> np.ndarray:
    """Length of `parts` (each inside exactly one gap) that falls in each gap."""
    out = np.zeros(len(gs))
    if len(parts[0]):
        k = np.searchsorted(gs, parts[0], side="right") - 1
        np.add.at(out, k, parts[1] - parts[0])
    return out


# Above this share of the idle time outside data loading ending at kernels whose launch is unknown (no correlation id
# linking them to a runtime call), the host/kernel wait split is not measured: null with a note. Kernels stripped of
# their args moved a trace's idle from host wait 53% to "other" 97.7% (outside audit); HTA's own trace_compare
# samples lack the launches of 89-94% of their kernels, its negative_queue sample of 11% (split kept, share said).
UNKNOWN_LAUNCH_MAX_PCT = 50.0


def pct(x: float, total: float) -> float | None:
    return 100.0 * x / total if total > 0 else None


def summarize(t: Times, on_gpu: bool, data_measured: bool = True) -> dict:
    """The JSON figures of a `Times`: percentages of the span (data wait too), and the idle split as
    percentages of idle (HTA's convention, kept so the split can be compared with it). A CPU trace without a
    data-loading annotation (`data_measured` False) gets null data wait: time loading data outside an annotation
    is idle like any other, and a 0.0 would read as measured. CPU traces add `operator_time`: the share of the
    step whose innermost operator is a matmul/conv (math), bandwidth-bound, other, compiled-graph or data-loading
    one."""
    idle = t.idle
    data = data_measured or on_gpu
    out = {
        "span_us": t.span,
        "temporal_breakdown": {
            "idle_pct": pct(idle, t.span),
            "compute_pct": pct(t.compute, t.span),
            "non_compute_pct": pct(t.busy - t.compute, t.span),
            "exposed_comm_pct": pct(t.comm_exposed, t.span),
            "exposed_memory_pct": pct(t.memory_exposed, t.span),
            # busy time in none of the three above (GPU kernels of no kind): the five shares add to 100
            "other_busy_pct": pct(max(t.busy - t.compute - t.comm_exposed - t.memory_exposed, 0.0), t.span),
            "data_wait_pct": pct(t.data_wait, t.span) if data else None,  # idle while loading data, of the step
        },
        "comm_comp_overlap_pct": pct(t.comm_overlapped, t.comm),
        "idle_breakdown": {
            "idle_us": idle,
            "host_wait_pct": pct(t.host_wait, idle) if on_gpu else None,
            "kernel_wait_pct": pct(t.kernel_wait, idle) if on_gpu else None,
            "data_wait_pct": pct(t.data_wait, idle) if data else None,
            "other_pct": pct(t.idle_other, idle),
        },
    }
    if on_gpu:
        ib = out["idle_breakdown"]
        split = t.host_wait + t.kernel_wait + t.idle_other  # the idle outside data loading
        ib["unknown_launch_pct"] = pct(t.idle_unknown_launch, idle)
        if split > 0 and 100.0 * t.idle_unknown_launch / split > UNKNOWN_LAUNCH_MAX_PCT:
            ib.update(host_wait_pct=None, kernel_wait_pct=None, other_pct=None)
            ib["note"] = (f"host/kernel wait not measured: {100.0 * t.idle_unknown_launch / split:.1f}% of the idle "
                          "time outside data loading ends at kernels without a correlation id linking them to their "
                          "launch (no args), so whether the host was late cannot be told")
    if on_gpu:  # the compute share split by what bounds its kernels (`activity._gpu_kernel_classes`)
        out["kernel_time"] = {"math_pct": pct(t.op_math, t.span), "bandwidth_pct": pct(t.op_memory, t.span),
                              "other_pct": pct(t.op_other, t.span)}
    if not on_gpu:
        out["operator_time"] = {
            "math_pct": pct(t.op_math, t.span), "bandwidth_pct": pct(t.op_memory, t.span),
            "other_pct": pct(t.op_other, t.span), "compiled_pct": pct(t.op_compiled, t.span),
            "data_loading_pct": pct(t.op_data, t.span),
            "compiled_region_pct": pct(t.op_in_compiled, t.span),  # whole compiled regions, what they call too
        }
    return out
