"""What `stride profile` writes into each trace beside Kineto's metadata (`stride.train.profiling`), and what the
analysis makes of it: the host's cores and threads (whether a collective on gloo's thread can hide compute) and the
trainer's own step time without the profiler (how much of the traced step the profiler added).

A CPU trace's collectives run on gloo's thread while the rank's main thread runs operators; that hides the
communication only if a core is free for gloo's thread. With 2 ranks x (1 intra-op thread + gloo's) on 2 cores
the threads took turns: the traces showed 46-64 % of the all-reduce "overlapped", and the same step with 100 MB
buckets (no overlap) took as long (outside audit 17, H1).
"""

from __future__ import annotations

from typing import Any

HOST_KEY = "stride_host"  # {"cores": ..., "intra_op_threads": ..., "ranks_on_host": ... or null}
UNPROFILED_KEY = "stride_unprofiled_step"  # {"median_us": ..., "steps_us": [...]}: the wait steps, timed


def _count(v: Any) -> int | None:
    return v if type(v) is int and v > 0 else None


def host_info(meta: dict[str, Any]) -> dict[str, int | None]:
    """The host's usable cores, the rank's intra-op threads and the ranks on its host, as the trace records them
    (None where it does not: another tool's trace, or a value that is not a positive integer)."""
    h = meta.get(HOST_KEY)
    h = h if isinstance(h, dict) else {}
    return {k: _count(h.get(k)) for k in ("cores", "intra_op_threads", "ranks_on_host")}


def unprofiled_step_us(meta: dict[str, Any]) -> float | None:
    """The median step time the trainer measured before the profiler started (None: not recorded)."""
    u = meta.get(UNPROFILED_KEY)
    v = u.get("median_us") if isinstance(u, dict) else None
    return float(v) if type(v) in (int, float) and 0 < v < float("inf") else None


def overlap_rule(meta: dict[str, Any], ranks_by_host_name: int | None = None) -> dict[str, Any]:
    """Whether communication under compute counts as hidden on a CPU trace: only where every thread that runs at
    once has a core, ranks_on_host x (intra-op threads + 1) <= cores. `ranks_by_host_name`: the ranks counted from
    the traces' host_name where all the run's traces are given (used where the trace does not record them)."""
    h = host_info(meta)
    cores, threads, ranks = h["cores"], h["intra_op_threads"], h["ranks_on_host"]
    source = "trace"
    if ranks is None and ranks_by_host_name:
        ranks, source = ranks_by_host_name, "host_name"
    out: dict[str, Any] = {"overlap_counted": False, "cores": cores, "intra_op_threads": threads,
                           "ranks_on_host": ranks, "ranks_on_host_source": source if ranks else None}
    if cores and threads and ranks:
        need = ranks * (threads + 1)
        out["overlap_counted"] = need <= cores
        out["short"] = f"{ranks} x ({threads} + 1) = {need} threads {'<=' if need <= cores else '>'} {cores} cores"
        out["reason"] = (f"{ranks} rank{'s' if ranks > 1 else ''} on the host x ({threads} intra-op thread"
                         f"{'s' if threads > 1 else ''} + 1 for the collectives) = {need} threads "
                         + (f"<= {cores} cores: a core is free for the collectives' thread"
                            if out["overlap_counted"] else
                            f"> {cores} cores: the collectives' thread takes turns with the compute"))
    else:
        out["short"] = "the trace does not record the host's cores and threads"
        out["reason"] = ("the trace does not record the host's cores, intra-op threads and ranks on the host "
                         "(`stride profile` writes them): whether a core was free for the collectives' thread is "
                         "unknown")
    return out
