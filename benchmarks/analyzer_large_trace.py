"""How fast, and in how much memory, `stride analyze` reads a large trace.

Writes a synthetic Kineto GPU trace of about --mb megabytes (profiler steps of operators, runtime
launches, kernels on two streams with NCCL among them, flow events and Python frames, in the mix of
a real trace), then runs `analyze_traces` on it in a fresh child process and reports the wall time,
the rate in MB/s, the extrapolated time for 1 GB at that rate, and the child's peak RSS, next to the
peak RSS of a child that only imports the analyzer (the floor). Goal (issue 9): 1 GB in < 60 s.

    .venv/bin/python benchmarks/analyzer_large_trace.py --mb 200 [--gz] [--json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_trace(path: Path, target_bytes: int, gz: bool) -> tuple[int, int]:
    """Write the trace; returns (bytes of JSON text, number of events)."""
    opener = gzip.open if gz else open
    n = 0
    written = 0
    with opener(path, "wt") as fh:
        head = '{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},\n' \
               ' "traceEvents": [\n'
        fh.write(head)
        written += len(head)
        ts, corr, step, first = 1_000_000.0, 1, 1, True
        while written < target_bytes:
            step_start = ts
            parts = []
            for k in range(200):  # 200 kernels a step
                corr += 1
                op_ts = ts
                parts.append(f'{{"ph": "X", "cat": "cpu_op", "name": "aten::op{k % 17}", "pid": 10, "tid": 10, '
                             f'"ts": {op_ts:.3f}, "dur": 9.5, '
                             f'"args": {{"External id": {corr}, "Sequence number": {k}}}}}')
                parts.append(f'{{"ph": "X", "cat": "python_function", "name": "model.py({k}): forward", "pid": 10, '
                             f'"tid": 10, "ts": {op_ts - 1:.3f}, "dur": 12.0, "args": {{"Python id": {k}}}}}')
                parts.append(f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, '
                             f'"ts": {op_ts + 1:.3f}, "dur": 4.2, "args": {{"correlation": {corr}, "cbid": 211}}}}')
                stream = 20 if k % 10 == 0 else 7
                name = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)" if stream == 20 else \
                    f"void at::native::vectorized_elementwise_kernel<4, at::native::Functor{k % 23}>(int)"
                parts.append(f'{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": {stream}, '
                             f'"ts": {op_ts + 6:.3f}, "dur": {8.0 + k % 5}, "args": {{"stream": {stream}, '
                             f'"correlation": {corr}, "device": 0, "grid": [128, 1, 1], "block": [256, 1, 1]}}}}')
                parts.append(f'{{"ph": "s", "id": {corr}, "pid": 10, "tid": 10, "ts": {op_ts + 1:.3f}, '
                             f'"cat": "ac2g", "name": "ac2g"}}')
                parts.append(f'{{"ph": "f", "id": {corr}, "pid": 0, "tid": {stream}, "ts": {op_ts + 6:.3f}, '
                             f'"cat": "ac2g", "name": "ac2g", "bp": "e"}}')
                ts += 12.0
            parts.append(f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": 10, '
                         f'"tid": 10, "ts": {step_start:.3f}, "dur": {ts - step_start:.3f}, "args": {{}}}}')
            text = (",\n" if not first else "") + ",\n".join(parts)
            first = False
            fh.write(text)
            written += len(text)
            n += len(parts)
            step += 1
            ts += 50.0
        fh.write("\n]}\n")
    return written, n


CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from stride.profile.analyze import analyze_traces
if sys.argv[1] != "-":
    rep = analyze_traces([sys.argv[1]])
    r = rep["ranks"]["0"]
    out = {"steps": len(r["steps"]), "idle_pct": r["temporal_breakdown"]["idle_pct"]}
else:
    out = {}
out["seconds"] = time.perf_counter() - t0
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def run_child(arg: str) -> dict:
    res = subprocess.run([sys.executable, "-c", CHILD, arg], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100.0, help="size of the JSON text in MB (default 100)")
    ap.add_argument("--gz", action="store_true", help="write the trace gzip-compressed (.json.gz)")
    ap.add_argument("--json", action="store_true", help="print the headline JSON object last")
    ap.add_argument("--keep", metavar="DIR", help="write the trace into DIR and keep it")
    a = ap.parse_args()
    d = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="stride-bigtrace-"))
    d.mkdir(parents=True, exist_ok=True)
    path = d / ("big.json.gz" if a.gz else "big.json")
    t0 = time.perf_counter()
    text_bytes, n_events = write_trace(path, int(a.mb * 1e6), a.gz)
    gen_s = time.perf_counter() - t0
    floor = run_child("-")
    res = run_child(str(path))
    mb = text_bytes / 1e6
    rate = mb / res["seconds"]
    out = {
        "trace_mb": round(mb, 1), "file_mb": round(os.path.getsize(path) / 1e6, 1), "gzip": a.gz,
        "events": n_events, "steps": res["steps"], "generate_s": round(gen_s, 1),
        "analyze_s": round(res["seconds"], 2), "rate_MBps": round(rate, 1),
        "extrapolated_1GB_s": round(1000.0 / rate, 1),
        "peak_rss_mb": round(res["peak_rss_mb"], 1), "import_floor_rss_mb": round(floor["peak_rss_mb"], 1),
    }
    print(f"{mb:.0f} MB of trace text ({n_events} events{', gzip' if a.gz else ''}): analysed in "
          f"{res['seconds']:.1f} s = {rate:.1f} MB/s -> 1 GB in about {1000 / rate:.0f} s; "
          f"peak RSS {res['peak_rss_mb']:.0f} MB (import alone {floor['peak_rss_mb']:.0f} MB)")
    if not a.keep:
        path.unlink()
        d.rmdir()
    if a.json:
        print(json.dumps(out))
    _ = resource  # the parent's own RSS is not the figure: the analysis runs in the child
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
