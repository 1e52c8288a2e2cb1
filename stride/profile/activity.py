"""What the device is doing, as merged interval sets: compute, communication, memory, other.

On a GPU trace the device is the accelerator and the sets come from kernels, copies and sets (kinds by
name, see `classify`). On a CPU-only trace the "device" is the host, and each instant of a thread is given to the
innermost event running on it (`cpu_segments`): communication is the union of host collectives (gloo runs them on
its own threads, c10d's calls block the calling thread, so anything a thread runs inside a collective is
communication) and of DDP's reducer operators (bucket copies and averaging, `classify.is_ddp_reducer`); operators
run under a data-loading annotation on the same thread are data loading, not training work (the loader's torch
ops: the step waits for data while they run); the other operators' own time is compute
(matmul/conv/attention, framework wrappers, unrecognised and compiled-graph operators) or memory (bandwidth-bound
operators: elementwise, reductions, copies, norms; `classify.cpu_op_class`).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

from stride.profile import intervals as iv
from stride.profile.classify import (
    ANNOTATION_CATS,
    COMM,
    COMPUTE,
    DATA,
    MEMORY,
    MEMORY_CATS,
    OP_CLASS_NAMES,
    OP_COMPILED,
    OP_MATH,
    OP_MEMORY,
    OP_OTHER,
    OPERATOR_CATS,
    RUNTIME_CATS,
    cpu_op_class,
    device_kind,
    gpu_kernel_class,
    is_compiled_code,
    is_data_annotation,
    is_ddp_reducer,
    is_host_comm,
    step_number,
)
from stride.profile.trace_model import RankTrace

LONG_EVENTS = 64  # the longest events of a trace, checked against each window apart (`Activity.long_events`)


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
    # CPU traces: time per operator class (OP_CLASS_NAMES, and "data" for the loader's operators), each a union
    # over threads of the instants whose innermost operator is of that class, and "in_compiled": the union of
    # compiled regions and inductor kernels, whole; GPU traces: the compute kernels' time by class
    # (`_gpu_kernel_classes`: math, bandwidth, other; the rest empty)
    op_classes: dict[str, iv.Intervals] | None = None
    data_annotated: bool = False  # the trace has a data-loading annotation (data wait is measured through them)

    # `kernels._in_windows`: event indices by start; the longest events apart (LONG_EVENTS of them, checked against
    # every window), and the longest duration of the others (how far back a window's search reaches)
    start_order: np.ndarray | None = None
    long_events: np.ndarray | None = None
    long_ts: np.ndarray | None = None  # their starts and ends
    long_end: np.ndarray | None = None
    reach: float = 0.0

    def __post_init__(self) -> None:
        order = np.argsort(self.ev_ts, kind="stable")
        self.sorted_ts, self.sorted_launch = self.ev_ts[order], self.ev_launch[order]
        self.start_order = order
        dur = self.ev_end - self.ev_ts
        if len(dur) > LONG_EVENTS:
            self.long_events = np.sort(np.argpartition(dur, -LONG_EVENTS)[-LONG_EVENTS:])
            rest = np.ones(len(dur), dtype=bool)
            rest[self.long_events] = False
            self.reach = float(dur[rest].max())
        else:
            self.long_events = np.arange(len(dur))
            self.reach = 0.0
        self.long_ts, self.long_end = self.ev_ts[self.long_events], self.ev_end[self.long_events]


def name_kinds(t: RankTrace) -> np.ndarray:
    """Kind of each interned name by the device kernel rules (a CPU trace's operators: `_cpu_activity`)."""
    return np.array([device_kind(n) for n in t.names], dtype=np.int8)


def data_annotation_mask(t: RankTrace) -> np.ndarray:
    """Host events that are data-loading annotations (`classify.is_data_annotation`); torch's own
    `enumerate(DataLoader)#...` scope also where the trace files it as an operator (`marker_ops`)."""
    if not len(t.names):
        return np.zeros(len(t.host_ts), dtype=bool)
    by_name = np.array([is_data_annotation(n) for n in t.names], dtype=bool)
    loader = np.array([n.startswith(_LOADER_SCOPE) for n in t.names], dtype=bool)
    return ((np.isin(t.host_cat, t.cat_ids(ANNOTATION_CATS)) & by_name[t.host_name])
            | (np.isin(t.host_cat, t.cat_ids(OPERATOR_CATS)) & loader[t.host_name]))


_LOADER_SCOPE = "enumerate(DataLoader)#"


def marker_ops(t: RankTrace) -> np.ndarray:
    """Host events of an operator category that are record_function scopes, not operators: `ProfilerStep#N` and
    `enumerate(DataLoader)#...`. Older torch.profiler traces (category `Operator`, or `cpu_op`) file them with the
    operators; read as one, a step's own scope covered every gap: a CPU step busy 20 % read "compute-bound, idle
    0.0%" with ProfilerStep#1-3 as its top operators (outside audit of `stride analyze`)."""
    if not len(t.names):
        return np.zeros(len(t.host_ts), dtype=bool)
    scope = np.array([step_number(n) is not None or n.startswith(_LOADER_SCOPE) for n in t.names], dtype=bool)
    return np.isin(t.host_cat, t.cat_ids(OPERATOR_CATS)) & scope[t.host_name]


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


# classes of the CPU sweep: an operator's own class (OP_*), or one of these
_SEG_COMM, _SEG_DATA_OP, _SEG_DATA_MARK = 10, 11, 12  # a collective; an operator in data loading; the loader's own
_BLOCK = 1 << 16  # events converted to Python numbers at a time


def cpu_segments(ts: np.ndarray, end: np.ndarray, cls: np.ndarray, lane: np.ndarray,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each thread's timeline cut where an event starts or ends, each piece given to the innermost event running.

    `cls` per event: an OP_* class, _SEG_COMM (a collective) or _SEG_DATA_MARK (a data-loading annotation). A piece
    inside a collective on the same thread is communication (DDP's `c10d::allreduce_` inside AccumulateGrad blocks
    the thread), one under a data-loading annotation data loading (the loader's own ops), else the innermost
    operator's class. Returns (starts, ends, classes) of the pieces, with no piece for a thread's time in no event or
    in a data annotation alone (the loader idle, which the breakdown counts as data wait), and each event's effective
    class. Events are taken as nested, as on one thread they are; a child outliving its parent is cut at it.
    One pass in Python over the events in order, read in blocks and written to typed arrays (8 bytes a number), so
    memory stays near the trace's own arrays; adjacent pieces of one class are joined.
    """
    n = len(ts)
    eff = np.empty(n, dtype=np.int8)
    if n == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int8), eff
    # by thread, then start, parents (longer; annotations before operators of the same interval) first
    order = np.lexsort((cls != _SEG_DATA_MARK, -end, ts, lane))
    out_s, out_e, out_c = array("d"), array("d"), array("b")
    stack_end: list[float] = []
    stack_cls: list[int] = []
    cursor = 0.0
    prev_lane = None

    def emit(a: float, b: float, c: int) -> None:
        if c == _SEG_DATA_MARK:
            return
        if out_c and out_c[-1] == c and out_e[-1] == a:
            out_e[-1] = b
        else:
            out_s.append(a), out_e.append(b), out_c.append(c)

    def drain(until: float | None) -> None:
        nonlocal cursor
        while stack_end and (until is None or stack_end[-1] <= until):
            e, c = stack_end.pop(), stack_cls.pop()
            if e > cursor:
                emit(cursor, e, c)
                cursor = e

    for lo in range(0, n, _BLOCK):
        idx = order[lo:lo + _BLOCK]
        effs = []
        for s, e_i, own, ln in zip(ts[idx].tolist(), end[idx].tolist(), cls[idx].tolist(), lane[idx].tolist(),
                                   strict=True):
            if ln != prev_lane:
                drain(None)
                prev_lane, cursor = ln, s
            if stack_end and stack_end[-1] <= s:
                drain(s)
            if stack_end:
                parent = stack_cls[-1]
                if s > cursor:
                    emit(cursor, s, parent)
            else:
                parent = -1
            cursor = max(cursor, s)
            if parent == _SEG_COMM or own == _SEG_COMM:
                c = _SEG_COMM
            elif own == _SEG_DATA_MARK:
                c = _SEG_DATA_MARK
            elif parent in (_SEG_DATA_MARK, _SEG_DATA_OP):
                c = _SEG_DATA_OP
            else:
                c = own
            effs.append(c)
            stack_end.append(min(e_i, stack_end[-1]) if stack_end else e_i)
            stack_cls.append(c)
        eff[idx] = effs
    drain(None)
    return (np.frombuffer(out_s, dtype=np.float64), np.frombuffer(out_e, dtype=np.float64),
            np.frombuffer(out_c, dtype=np.int8), eff)


def _cpu_activity(t: RankTrace) -> Activity:
    """The CPU trace's sets from `cpu_segments`: compute = math, other and compiled operators' own time; memory =
    bandwidth-bound operators'; comm = the union of collectives (every thread); the loader's operators in neither."""
    is_op = np.isin(t.host_cat, t.cat_ids(OPERATOR_CATS)) & ~marker_ops(t)
    is_ann = np.isin(t.host_cat, t.cat_ids(ANNOTATION_CATS))
    comm_by_name = np.array([is_host_comm(n) or is_ddp_reducer(n) for n in t.names], dtype=bool)
    class_by_name = np.array([cpu_op_class(n) for n in t.names], dtype=np.int8)
    host_comm = comm_by_name[t.host_name] if len(t.host_name) else np.zeros(0, dtype=bool)
    data_mark = data_annotation_mask(t)
    # the events the sets are built from: operators and collectives (as before), and data annotations as markers
    ev = (is_op | (is_ann & host_comm)) if len(t.host_name) else np.zeros(0, dtype=bool)
    sweep = ev | data_mark
    cls = np.where(host_comm, _SEG_COMM, np.where(data_mark, _SEG_DATA_MARK, class_by_name[t.host_name]
                                                  if len(t.host_name) else 0)).astype(np.int8)
    h_end = t.host_ts + t.host_dur
    seg_s, seg_e, seg_c, eff = cpu_segments(t.host_ts[sweep], h_end[sweep], cls[sweep], t.host_tid[sweep])
    eff_all = np.zeros(len(t.host_ts), dtype=np.int8)
    eff_all[sweep] = eff
    ts, end = t.host_ts[ev], h_end[ev]
    own, eff_ev = cls[ev], eff_all[ev]
    # each event's kind (operator table, tiny operators, stragglers): a collective by name is communication, an
    # operator under a data annotation (and no collective) data loading, else its own class
    kind = np.where(own == _SEG_COMM, COMM, np.where(eff_ev == _SEG_DATA_OP, DATA,
                    np.where(own == OP_MEMORY, MEMORY, COMPUTE))).astype(np.int8)

    def seg(*classes: int) -> iv.Intervals:
        m = np.isin(seg_c, classes)
        return iv.union(seg_s[m], seg_e[m])

    compute, memory = seg(OP_MATH, OP_OTHER, OP_COMPILED), seg(OP_MEMORY)
    comm = iv.union(ts[kind == COMM], end[kind == COMM])
    busy = iv.union(np.concatenate([compute[0], memory[0], comm[0]]), np.concatenate([compute[1], memory[1], comm[1]]))
    classes = {OP_CLASS_NAMES[k]: seg(k) for k in (OP_MATH, OP_MEMORY, OP_OTHER, OP_COMPILED)}
    classes["data"] = seg(_SEG_DATA_OP)
    # time inside compiled code, operators and kernels within included (advice should not ask to compile it again)
    compiled_by_name = np.array([is_compiled_code(n) for n in t.names], dtype=bool)
    in_compiled = is_op & compiled_by_name[t.host_name] if len(t.host_name) else np.zeros(0, dtype=bool)
    classes["in_compiled"] = iv.union(t.host_ts[in_compiled], h_end[in_compiled])
    return Activity(
        on_gpu=False, compute=compute, comm=comm, memory=memory, other=(np.zeros(0), np.zeros(0)), busy=busy,
        ev_ts=ts, ev_end=end, ev_name=t.host_name[ev], ev_kind=kind, ev_launch=np.full(len(ts), np.nan),
        ev_lane=t.host_tid[ev], op_classes=classes, data_annotated=bool(data_mark.any()),
    )


def build_activity(t: RankTrace) -> Activity:
    if t.has_device:
        kinds = name_kinds(t)[t.dev_name]
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
        return _cpu_activity(t)

    def u(mask: np.ndarray) -> iv.Intervals:
        return iv.union(ts[mask], end[mask])

    compute = u(kind == COMPUTE)
    return Activity(
        on_gpu=on_gpu,
        compute=compute, comm=u(kind == COMM), memory=u(kind == MEMORY),
        other=u((kind != COMPUTE) & (kind != COMM) & (kind != MEMORY)), busy=iv.union(ts, end),
        ev_ts=ts, ev_end=end, ev_name=name, ev_kind=kind, ev_launch=launch, ev_lane=lane,
        op_classes=_gpu_kernel_classes(t, ts, end, name, kind),
        data_annotated=bool(data_annotation_mask(t).any()),
    )


def _gpu_kernel_classes(t: RankTrace, ts: np.ndarray, end: np.ndarray, name: np.ndarray, kind: np.ndarray,
                        ) -> dict[str, iv.Intervals]:
    """The compute kernels' time split by what bounds them (`classify.gpu_kernel_class`), disjoint and adding up to
    the compute union: matmul/conv kernels' time, bandwidth-bound kernels' time outside it, the rest outside both."""
    cls = np.array([gpu_kernel_class(n) for n in t.names], dtype=np.int8)[name] if len(name) else np.zeros(0, np.int8)
    comp = kind == COMPUTE

    def u(mask: np.ndarray) -> iv.Intervals:
        return iv.union(ts[mask], end[mask])

    math, bw = u(comp & (cls == OP_MATH)), u(comp & (cls == OP_MEMORY))
    math_bw = iv.union(np.concatenate([math[0], bw[0]]), np.concatenate([math[1], bw[1]]))
    empty = (np.zeros(0), np.zeros(0))
    other = iv.subtract(u(comp & (cls == OP_OTHER)), math_bw)
    return {"math": math, "bandwidth": iv.subtract(bw, math), "other": other, "compiled": empty, "data": empty,
            "in_compiled": empty}
