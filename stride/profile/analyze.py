"""`analyze_traces(paths) -> dict`: the whole analysis of one or more rank traces (what `--json` prints)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from stride.files.input_file import not_found_or_special
from stride.profile import intervals as iv
from stride.profile.activity import build_activity
from stride.profile.annotations import annotation_breakdown, data_spans
from stride.profile.breakdown import Times, pct, summarize, window_times
from stride.profile.classify import DATA_ANNOTATIONS_DOC
from stride.profile.errors import NotATrace, TraceError
from stride.profile.hta_compat import hta_figures
from stride.profile.kernels import tiny_kernels, top_kernels
from stride.profile.one_run import check_one_run
from stride.profile.precision_advice import DtypeSpeeds, precision_line
from stride.profile.run_meta import overlap_rule, unprofiled_step_us
from stride.profile.stragglers import find_stragglers, rank_steps
from stride.profile.trace_model import RankTrace, distributed_info, load_trace
from stride.profile.verdict import IDLE_BOUND_PCT, NO_ACTIVITY, no_activity_verdict, rank_verdict, step_verdict
from stride.profile.windows import analysed_windows

TRACE_SUFFIXES = (".json", ".json.gz")


def find_traces(paths: Iterable[str | Path], from_dirs: set[Path] | None = None) -> list[Path]:
    """Files as given, directories expanded to their `*.json` / `*.json.gz` files (sorted, not recursive);
    a run directory (summary.json or config.toml beside a traces/ folder) stands for its traces/. The files found
    in directories are added to `from_dirs` where given."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir() and (p / "traces").is_dir() and ((p / "summary.json").is_file() or (p / "config.toml").is_file()):
            p = p / "traces"  # a `stride profile` / `stride train` run directory: its traces
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise TraceError(f"{p}: directory holds no .json or .json.gz trace")
            out.extend(found)
            if from_dirs is not None:
                from_dirs.update(found)
        elif p.is_file():
            out.append(p)
        else:
            raise TraceError(not_found_or_special(p))
    return out


PROFILER_IDLE_NOTE = ("no unprofiled step time in the trace (`stride profile` records it, with --wait 2 or more): the "
                      "profiler's own per-operator cost is in the idle time")


def _added(times: Times, unprofiled: float) -> float:
    """The time the profiler added to one step: span - unprofiled, at most the step's idle outside data loading (its
    per-operator cost shows as gaps between operators, not as waits inside a data annotation: a step whose wait steps
    ran faster for another reason, batches prefetched at start-up, had its 45 % data wait taken out and read
    compute-bound)."""
    return min(max(times.span - unprofiled, 0.0), max(times.idle - times.data_wait, 0.0))


def _step_time(span: float, idle: float, n_steps: int, unprofiled: float | None, inflation: float = 0.0) -> dict:
    """The traced step beside the trainer's unprofiled one, and idle without `inflation`, the time the profiler
    added (`_added`, summed over the steps)."""
    profiled = span / n_steps if n_steps else 0.0
    out: dict = {"profiled_ms": profiled / 1e3, "unprofiled_ms": None, "ratio": None, "profiler_idle_pct": None,
                 "idle_pct_excluding_profiler": None}
    if unprofiled is None or span <= 0:
        out["note"] = PROFILER_IDLE_NOTE
        return out
    out.update(unprofiled_ms=unprofiled / 1e3, ratio=profiled / unprofiled, profiler_idle_pct=pct(inflation, span),
               idle_pct_excluding_profiler=pct(idle - inflation, span - inflation))
    return out


def per_device(t: RankTrace, windows: list) -> list[dict] | None:
    """Where one trace holds the kernels of several devices (one process driving two GPUs: naive model or pipeline
    parallelism), each device's busy and idle share of the analysed steps; None for one device. The breakdown is of
    their union: two GPUs taking turns, each idle half the step, read "compute-bound, idle 0.0%" (outside audit)."""
    if not len(t.dev_ts) or not windows:
        return None
    keep = ~np.isin(t.dev_cat, t.cat_ids(frozenset({"cuda_sync"})))
    devices = sorted(int(d) for d in np.unique(t.dev_device[keep]) if d >= 0)
    if len(devices) < 2:
        return None
    span = sum(w.span for w in windows)
    out = []
    for d in devices:
        m = keep & (t.dev_device == d)
        busy = iv.union(t.dev_ts[m], t.dev_ts[m] + t.dev_dur[m])
        b = sum(iv.length(iv.clip(busy, w.start, w.end)) for w in windows)
        out.append({"device": d, "busy_pct": pct(b, span), "idle_pct": pct(span - b, span)})
    return out


def _devices_line(devices: list[dict]) -> str:
    return (f"kernels of {len(devices)} devices in one trace: the figures are of their union, so a device idle while "
            "another works counts as busy; each device's idle: "
            + ", ".join(f"device {d['device']} {d['idle_pct']:.1f}%" for d in devices))


def analyze_rank(t: RankTrace, top_k: int = 10, drop_last_step: bool = False,
                 precision: str | None = None, ranks_by_host_name: int | None = None) -> tuple[dict, object]:
    """stride's own figures for one rank, per step and over all analysed steps. `precision` is the
    lower-precision recommendation the measurements allow for this rank's machine (None: none);
    `ranks_by_host_name` the run's ranks on this trace's host, counted from all its traces (None: not known)."""
    act = build_activity(t)
    windows = analysed_windows(t, act, drop_last_step)
    data = data_spans(t)
    total = Times()
    per_step = []
    device = "gpu" if act.on_gpu else "cpu"
    recorded = len(act.ev_ts) > 0  # any kernel, CPU operator or collective (else: step annotations only)
    # CPU: communication under compute hides nothing unless a core is free for the collectives' thread
    rule = overlap_rule(t.meta, ranks_by_host_name) if not act.on_gpu and len(act.comm[0]) else None
    counted = rule is None or rule["overlap_counted"]
    unprofiled = unprofiled_step_us(t.meta)
    inflation = 0.0
    for w in windows:
        times = window_times(act, w, data, counted)
        total += times
        fig = summarize(times, act.on_gpu, act.data_annotated)
        fig["step"] = w.step
        if unprofiled is not None:
            added = _added(times, unprofiled)
            inflation += added
            fig["step_time"] = _step_time(times.span, times.idle, 1, unprofiled, added)
        fig["verdict"] = (step_verdict(fig, tiny_kernels(act, [w]), precision, device) if recorded
                          else no_activity_verdict(device))
        per_step.append(fig)
    fig = summarize(total, act.on_gpu, act.data_annotated)
    fig["step_time"] = _step_time(total.span, total.idle, sum(w.span > 0 for w in windows), unprofiled, inflation)
    if rule is not None:
        rule["concurrent_pct"] = pct(total.comm_concurrent, total.comm)  # of the communication time
        fig["comm_overlap_rule"] = rule
    tiny = tiny_kernels(act, windows)
    result = {
        "file": str(t.path),
        "rank_source": t.rank_source,
        # events left out as malformed (a trace with more than MALFORMED_MAX of them is refused): said, not hidden
        "malformed_events": t.malformed_summary(),
        "duplicate_events": t.duplicates_summary(),  # exact copies of an event, dropped: counted once, said
        "device": device,
        "steps": [w.step for w in windows],
        **fig,
        "top_kernels": top_kernels(act, t.names, windows, top_k),
        "tiny_kernels": tiny,
        "annotations": annotation_breakdown(t, windows),
        "per_step": per_step,
        "verdict": (None if not windows else rank_verdict(fig, per_step, tiny, precision, device) if recorded
                    else {**no_activity_verdict(device), "steps_by_bound": {NO_ACTIVITY: len(per_step)}}),
    }
    devices = per_device(t, windows)
    if devices:
        result["devices"] = devices
        result["devices_note"] = _devices_line(devices)
        idlest = max(devices, key=lambda d: d["idle_pct"] or 0.0)
        v = result["verdict"]
        if v and "reasons" in v and (idlest["idle_pct"] or 0.0) > IDLE_BOUND_PCT >= (fig["temporal_breakdown"]
                                                                                   ["idle_pct"] or 0.0):
            v["reasons"].append(f"device {idlest['device']} is idle {idlest['idle_pct']:.1f}% of the step (> "
                                f"{IDLE_BOUND_PCT}%) while another device works: this verdict is of the devices' "
                                "union; balance the work between them (pipeline micro-batches)")
    if not act.on_gpu and not act.data_annotated:  # said in the table too: "-" alone would not say why
        result["data_wait_note"] = (f"data wait not measured: no data-loading annotation in the trace "
                                    f"({DATA_ANNOTATIONS_DOC}); data loaded outside one counts as idle")
    host = t.meta.get("host_name") if isinstance(t.meta.get("host_name"), str) else None
    return result, rank_steps(t.rank, host, windows, t.steps, act, t.names)


def ranks_per_host(traces: list[RankTrace]) -> dict[int, int]:
    """Rank -> the run's ranks on its host (by `host_name`), where every rank's trace is given (their number is
    the world size they state) and each names its host; else empty."""
    sizes = set()
    for t in traces:
        info = distributed_info(t.path, t.meta)
        sizes.add(info.get("world_size") if isinstance(info, dict) else None)
    hosts = [t.meta.get("host_name") for t in traces]
    world = sizes.pop() if len(sizes) == 1 else None
    if world != len(traces) or not all(isinstance(h, str) and h for h in hosts):
        return {}
    return {t.rank: hosts.count(h) for t, h in zip(traces, hosts, strict=True)}


def load_traces(paths: Iterable[str | Path]) -> tuple[list[RankTrace], list[dict]]:
    """The traces, and the files skipped: a JSON object without `traceEvents` found in a directory (another tool's
    file beside the traces; named as given, it is an error, as is invalid JSON or a trace cut short)."""
    in_dirs: set[Path] = set()
    files = find_traces(paths, in_dirs)
    traces, skipped = [], []
    for f in files:
        try:
            traces.append(load_trace(f))
        except NotATrace:
            if f not in in_dirs:
                raise
            skipped.append({"file": str(f), "why": "a JSON object without 'traceEvents': not a trace"})
    if not traces:
        raise TraceError(f"{', '.join(s['file'] for s in skipped[:3])}: no trace among the files "
                         "(JSON objects without 'traceEvents')")
    return traces, skipped


def _rank_list(ranks: list[int]) -> str:
    """[0, 2, 3, 4, 7] -> "ranks 0, 2-4, 7"; one rank -> "rank 5"."""
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(parts)


def ranks_given(traces: list[RankTrace]) -> dict | None:
    """Where the traces state a world size and fewer ranks are given, what says which are missing; else None. The
    straggler check compares the ranks given: with rank 0 of a 2-rank run missing it said "no stragglers" (exit 0, no
    note) of a run whose other rank was never looked at (outside audit of `stride analyze`)."""
    sizes = set()
    for t in traces:
        info = distributed_info(t.path, t.meta)
        n = info.get("world_size") if isinstance(info, dict) else None
        if type(n) is int and n > 0:
            sizes.add(n)
    if len(sizes) != 1:
        return None
    world = sizes.pop()
    have = {t.rank for t in traces}
    missing = sorted(set(range(world)) - have)
    if not missing:
        return None
    note = (f"{len(have)} of {world} ranks given ({_rank_list(missing)} missing): stragglers not checked "
            "(give every rank's trace to compare them)")
    return {"given": len(have), "world_size": world, "missing": missing, "note": note}


def waiting_on_straggler(ranks: dict[str, dict], straggler: dict) -> None:
    """The verdict of each rank that waited for the straggler inside its collectives (one clock) says so, first:
    its exposed communication is largely that wait, which bigger buckets or gradient accumulation do not remove
    (rank 0 of a 2-rank gloo run read "communication-bound, exposed comm 36.2%" while 28 ms of its 32 ms per step in
    the all-reduce was waiting for rank 1)."""
    late = straggler["rank"]
    for w in straggler.get("waiting_ranks") or []:
        r = ranks.get(str(w["rank"]))
        v = r and r.get("verdict")
        if not v or "reasons" not in v:
            continue
        lag_ms = (straggler["collective_start_lag_us"] or 0.0) / 1e3
        v["waiting_on"] = {"rank": late, "wait_us_per_step": w["wait_us_per_step"],
                           "wait_pct_of_step": w["wait_pct_of_step"]}
        v["reasons"].append(f"{w['wait_pct_of_step']:.1f}% of the step is waiting in collectives for rank {late} "
                            f"(it entered them {lag_ms:.1f} ms later, median)")
        v["recommendations"].insert(0, (
            f"waiting on rank {late}: {w['wait_us_per_step'] / 1e3:.1f} ms per step of this rank's collectives is "
            f"spent before rank {late} enters them; fix the imbalance first (rank {late}'s extra work per step, "
            "uneven batches, a busier core or host), as communication tuning does not shorten that wait"))


def analyze_traces(
    paths: Iterable[str | Path], *, hta_compatible: bool = False, include_last_step: bool = False, top_k: int = 10,
    dtype_speeds: Callable[[RankTrace], DtypeSpeeds | None] | None = None, run_precision: str | None = None,
) -> dict:
    """Analyse the traces (files or directories; one trace per rank) and return the report dict.

    With `hta_compatible`, temporal breakdown, overlap and idle split follow HTA's definitions (last
    profiler step dropped unless `include_last_step`); the other figures are stride's over the same steps.
    `dtype_speeds(trace)` gives the speed per dtype measured on the machine that recorded the trace,
    or None where unknown; `run_precision` the traced run's precision. Lower precision is
    recommended only where those measurements (or, for GPUs, the datasheets) say it is faster.
    """
    traces, skipped = load_traces(paths)
    check_one_run(traces)  # ranks of one run, or refused naming the files (stride.profile.one_run)
    by_rank: dict[int, RankTrace] = {}
    for t in traces:
        if t.rank in by_rank:
            raise TraceError(f"{t.path}: rank {t.rank} ({t.rank_source}) is also the rank of {by_rank[t.rank].path}")
        by_rank[t.rank] = t
    n_step_names = len({s.number for t in traces for s in t.steps})
    on_host = ranks_per_host(traces)
    ranks: dict[str, dict] = {}
    straggler_input = []
    for rank in sorted(by_rank):
        t = by_rank[rank]
        device = "gpu" if t.has_device else "cpu"
        precision = precision_line(device, run_precision, dtype_speeds(t) if dtype_speeds else None)
        res, rs = analyze_rank(t, top_k, drop_last_step=hta_compatible and not include_last_step,
                               precision=precision, ranks_by_host_name=on_host.get(rank))
        if hta_compatible:
            hta = hta_figures(t, include_last_step, n_step_names)
            keys = ("span_us", "temporal_breakdown", "comm_comp_overlap_pct", "idle_breakdown")
            res.update({k: hta[k] for k in keys})
            if "note" in hta:
                res["note"] = hta["note"]
        ranks[str(rank)] = res
        straggler_input.append(rs)
    given = ranks_given(traces)
    stragglers = find_stragglers(straggler_input) if given is None else []
    if stragglers:
        waiting_on_straggler(ranks, stragglers[0])
    out = {
        "definitions": "hta" if hta_compatible else "stride",
        # HTA leaves out the last profiler step (it may be cut short); said so, as the step list then differs from
        # the same trace's stride report (audit 12 F10 read the two as disagreeing)
        "last_step_dropped": hta_compatible and not include_last_step,
        "ranks": ranks,
        "stragglers": stragglers,
    }
    if given is not None:  # a part of the run's ranks: no straggler can be ruled out, and "no stragglers" said so
        out["ranks_given"] = given
        out["stragglers_note"] = given["note"]
    if skipped:
        out["skipped_files"] = skipped
    return out
