"""Tiny synthetic Kineto traces whose breakdowns are known exactly (shared by the profile tests)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def kernel(name: str, ts: float, dur: float, stream: int, corr: int, cat: str = "kernel") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"stream": stream, "correlation": corr, "device": 0}}


def launch(ts: float, corr: int, dur: float = 1) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {"correlation": corr}}


def host(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def gpu_trace() -> dict:
    """One step [0, 100): compute [10,40) s7, nccl [30,60) s8, memcpy [70,80) s7, data annotation [85,95).

    busy = [10,60) + [70,80) = 60; compute 30; comm 30 of which 10 under compute; idle 40 =
    [0,10) host wait (its kernel launched at 5) + [60,70) kernel wait (launched at 20, gap 10 < 30)
    + [80,100): 10 data wait + 10 other.
    """
    ev = [
        host("ProfilerStep#1", 0, 100, cat="user_annotation"),
        host("## data_load ##", 85, 10, cat="user_annotation"),
        launch(5, 1), launch(8, 2), launch(20, 3),
        kernel("volta_sgemm_128x64_nn", 10, 30, 7, 1),
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 30, 30, 8, 2),
        kernel("Memcpy DtoH (Device -> Pinned)", 70, 10, 7, 3, cat="gpu_memcpy"),
    ]
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 4}, "traceEvents": ev}


def cpu_trace(rank: int = 0, shift: float = 0.0) -> dict:
    """One CPU step [0,100): aten::mm [10,50) with nested aten::add [20,30); gloo:all_reduce [40+s,70+s) on the
    gloo thread; c10d::allreduce_ [55+s,60+s); data annotation [0,10). Each rank is its own process (pid 1000 +
    rank), as under torchrun: two ranks' traces are never one process's (`stride analyze` refuses copies).

    With shift 0: busy [10,70) = 60, comm [40,70) = 30, idle 40 = 10 data wait + 30 other. Each instant is the
    innermost operator's: compute (matmul) [10,20) + [30,50) = 30, memory (the bandwidth-bound add) [20,30) = 10;
    operator work [10,50) = 40 overlaps comm by 10 (33.3%); exposed comm 20, exposed memory 10.
    """
    ev = [
        host("ProfilerStep#7", 0, 100, cat="user_annotation"),
        host("## data_load ##", 0, 10, cat="user_annotation"),
        host("aten::mm", 10, 40),
        host("aten::add", 20, 10),
        host("gloo:all_reduce", 40 + shift, 30, cat="user_annotation", tid=9),
        host("c10d::allreduce_", 55 + shift, 5),
    ]
    for e in ev:
        e["pid"] = 1000 + rank
    return {"schemaVersion": 1, "host_name": "h", "distributedInfo": {"backend": "gloo", "rank": rank,
            "world_size": 2}, "traceEvents": ev}


def write(path: Path, trace: dict, gz: bool = False) -> Path:
    text = json.dumps(trace, indent=1)
    if gz:
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path
