"""Packed training against the alternatives: N models of one workload, three ways, samples/s per model and memory.

For each workload (mlp_tiny, lstm_small, ts_transformer_tiny: the suite's definitions) and N:
- packed: one `PackedTrainer` of N models (seeds 0..N-1) in one process;
- sequential: the N models one after another in one process, each by the ordinary `Trainer` (`stride train`);
  a model's step time alone does not depend on how many follow it, so at most `--seq-cap` of the N are
  timed and their mean stands for all N (said in the output);
- processes: N `Trainer` runs in a pool of one process per core, one thread each (what Ray Tune does with
  one CPU per trial); at most 2 x cores of them are run, their concurrent step times stand for all N.
Samples/s per model = (model-samples trained per second of the variant) / N, over the timed steps after
`--warmup` steps; set-up (data, model build) is excluded from all three alike. Beside wall time, the CPU
seconds each model-step took (`cpu_s_per_model_step`, this process's or the worker's): on a machine that
other jobs load, wall-time ratios swing with their load, CPU-time ratios much less
(`cpu_packed_vs_sequential`). Every cell runs in a fresh process, so its peak memory (RSS on CPU, the
allocator's peak on CUDA) is its own; the variants of one (workload, N) alternate within each repeat, and
medians over `--repeats` are reported with the load average before and after. Headline:
`packed_vs_sequential` (goal on this 2-core CPU: >= 3 at N=16 for the launch-bound MLP and LSTM, >= 1 for
compute-bound ones; GPU goal 10 at N=64).

    .venv/bin/python benchmarks/sweep_packing.py [--workloads mlp_tiny,lstm_small,ts_transformer_tiny] [--n 1,4,16,64]
        [--repeats 2] [--device cpu|cuda] [--threads T] [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STEPS = {"mlp_tiny": 20, "lstm_small": 4, "ts_transformer_tiny": 4}  # timed steps per cell


def _config(workload: str, device: str, threads: int, steps: int, seed: int):
    """A suite workload by name, optionally with overrides after `+` (`mlp_tiny+train.batch_size=32`)."""
    from stride.bench.workloads import WORKLOADS
    from stride.config import load_config

    name, *extra = workload.split("+")
    w = WORKLOADS[name]
    return load_config(overrides=[*w.overrides, *extra, f"train.device={device}", f"train.threads={threads}",
                                  f"train.steps={steps}", "train.val_every=0", "train.target_val_loss=none",
                                  "metrics.flops=false", "metrics.progress=false", f"train.seed={seed}"])


def _solo(args: tuple[str, str, int, int, int, int]) -> tuple[float, float]:
    """One model alone by the Trainer: (mean wall seconds, CPU seconds of this process) per timed step."""
    workload, device, threads, warm, timed, seed = args
    from stride.train.trainer import Callback, Trainer

    class CpuClock(Callback):
        def __init__(self) -> None:
            self.marks: list[float] = []

        def on_step_end(self, trainer: Trainer) -> None:
            self.marks.append(time.process_time())

    cfg = _config(workload, device, threads, warm + timed, seed)
    cfg.metrics.skip_steps = warm
    clock = CpuClock()
    t = Trainer(config=cfg, write_run_dir=False, callbacks=[clock])
    t.fit()
    return statistics.fmean(t.timer.step_seconds[warm:]), (clock.marks[-1] - clock.marks[warm - 1]) / timed


def _peak(device: str) -> int:
    if device == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def cell(spec: dict[str, Any]) -> dict[str, Any]:
    """One (workload, N, variant) measurement, run in its own process."""
    import torch

    wl, n, variant, device = spec["workload"], spec["n"], spec["variant"], spec["device"]
    threads, warm, timed = spec["threads"], spec["warmup"], spec["timed"]
    batch = _config(wl, device, threads, 1, 0).train.batch_size
    torch.set_num_threads(threads)
    if variant == "packed":
        from stride.sweep.grouped_lstm import LSTM_MODE
        from stride.sweep.packed_train import PackedTrainer

        LSTM_MODE["mode"] = spec.get("lstm_mode", "auto")

        pt = PackedTrainer([_config(wl, device, threads, warm + timed, s) for s in range(n)],
                           chunk=spec.get("chunk") or None)
        pt.fit(until=warm)
        c0 = time.process_time()
        pt.fit()
        step = statistics.fmean(pt.step_times[warm:])
        return {"samples_per_s_per_model": batch / step, "measured_models": n, "peak_mem_bytes": _peak(device),
                "cpu_s_per_model_step": (time.process_time() - c0) / (timed * n), "chunk": pt.chunk_size}
    if variant == "sequential":
        m = min(n, spec["seq_cap"])
        runs = [_solo((wl, device, threads, warm, timed, s)) for s in range(m)]
        # N models one after another: each trains B samples per step, one model at a time
        return {"samples_per_s_per_model": batch / (n * statistics.fmean(r[0] for r in runs)), "measured_models": m,
                "peak_mem_bytes": _peak(device), "cpu_s_per_model_step": statistics.fmean(r[1] for r in runs)}
    cores = spec["cores"]
    m = min(n, 2 * cores)
    with mp.get_context("spawn").Pool(min(m, cores)) as pool:
        runs = pool.map(_solo, [(wl, device, 1, warm, timed, s) for s in range(m)])
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    concurrent = min(n, cores)
    return {"samples_per_s_per_model": concurrent * batch / (n * statistics.fmean(r[0] for r in runs)),
            "measured_models": m, "peak_mem_bytes": int(child * concurrent) if device == "cpu" else None,
            "cpu_s_per_model_step": statistics.fmean(r[1] for r in runs)}


def _run_cell(spec: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--cell", json.dumps(spec)], capture_output=True, text=True,
                         env=env, cwd=Path(__file__).resolve().parents[1])
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"rc {out.returncode}"}
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["cell_s"] = time.perf_counter() - t0
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="mlp_tiny,lstm_small,ts_transformer_tiny",
                    help="suite workloads, each optionally with +key=value overrides (mlp_tiny+train.batch_size=32)")
    ap.add_argument("--n", default="1,4,16,64")
    ap.add_argument("--variants", default="packed,sequential,processes")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timed", type=int, default=0, help="timed steps per cell (0: per workload)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch threads of the one-process variants (0: cores)")
    ap.add_argument("--seq-cap", type=int, default=16)
    ap.add_argument("--lstm-mode", default="auto", choices=("auto", "grouped", "per_model"),
                    help="packed LSTMs: grouped gates (GPU default) or one fused kernel call per model (CPU default)")
    ap.add_argument("--chunk", type=int, default=0,
                    help="models a packed step trains at once (0: the whole pack on a GPU, <= 16 on a CPU)")
    ap.add_argument("--quick", action="store_true", help="smoke run: N=1,4, one repeat, 2 timed steps")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cell", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.cell:
        print(json.dumps(cell(json.loads(a.cell))))
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = a.threads or cores
    ns = [1, 4] if a.quick else [int(v) for v in a.n.split(",")]
    repeats = 1 if a.quick else a.repeats
    variants = a.variants.split(",")
    from stride.metrics.env import cpu_model

    load_before = os.getloadavg()
    raw: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in range(repeats):
        for wl in a.workloads.split(","):
            timed = 2 if a.quick else (a.timed or STEPS.get(wl.split("+")[0], 4))
            for n in ns:
                for v in (variants if r % 2 == 0 else variants[::-1]):  # alternate the order between repeats
                    spec = {"workload": wl, "n": n, "variant": v, "device": a.device, "threads": threads,
                            "warmup": a.warmup, "timed": timed, "seq_cap": a.seq_cap, "cores": cores,
                            "lstm_mode": a.lstm_mode, "chunk": a.chunk}
                    res = _run_cell(spec)
                    raw.setdefault((wl, n, v), []).append(res)
                    print(f"# repeat {r} {wl} N={n} {v}: {res}", file=sys.stderr, flush=True)
    rows = []
    for (wl, n, v), results in raw.items():
        ok = [x for x in results if "error" not in x]
        rows.append({"workload": wl, "n": n, "variant": v,
                     "samples_per_s_per_model": statistics.median(x["samples_per_s_per_model"] for x in ok) if ok
                     else None, "runs": [x.get("samples_per_s_per_model") for x in results],
                     "peak_mem_bytes": max((x["peak_mem_bytes"] or 0 for x in ok), default=None) or None,
                     "measured_models": ok[0]["measured_models"] if ok else None,
                     "cpu_s_per_model_step": statistics.median(x["cpu_s_per_model_step"] for x in ok) if ok else None,
                     "errors": [x["error"] for x in results if "error" in x]})
    ratios = []
    for wl in a.workloads.split(","):
        for n in ns:
            get = {r["variant"]: r["samples_per_s_per_model"] for r in rows if r["workload"] == wl and r["n"] == n}
            cpu = {r["variant"]: r["cpu_s_per_model_step"] for r in rows if r["workload"] == wl and r["n"] == n}
            p, pc = get.get("packed"), cpu.get("packed")
            ratios.append({"workload": wl, "n": n,
                           "packed_vs_sequential": p / get["sequential"] if p and get.get("sequential") else None,
                           "packed_vs_processes": p / get["processes"] if p and get.get("processes") else None,
                           # CPU seconds per model-step, sequential over packed: less sensitive to other load
                           "cpu_packed_vs_sequential": cpu["sequential"] / pc if pc and cpu.get("sequential")
                           else None})
    report = {"cpu": cpu_model(), "cores": cores, "threads": threads, "device": a.device, "repeats": repeats,
              "lstm_mode": a.lstm_mode, "chunk": a.chunk,
              "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "rows": rows, "ratios": ratios}
    if a.json:
        print(json.dumps(report, indent=1))
    print(f"{report['cpu']}, {cores} cores, {threads} threads, device {a.device}, {repeats} repeat(s), load "
          f"{load_before[0]:.2f} -> {report['loadavg_after'][0]:.2f}")
    print(f"{'workload':<22}{'N':>4}  {'packed':>10} {'sequential':>11} {'processes':>10}  {'pk/seq':>7} {'pk/proc':>8}"
          f" {'cpu pk/seq':>10}  {'packed peak MiB':>15}")
    for q in ratios:
        cells = {r["variant"]: r for r in rows if r["workload"] == q["workload"] and r["n"] == q["n"]}
        sps = {v: cells.get(v, {}).get("samples_per_s_per_model") for v in ("packed", "sequential", "processes")}
        f = {v: f"{x:,.0f}" if x else "-" for v, x in sps.items()}
        mem = cells.get("packed", {}).get("peak_mem_bytes")
        print(f"{q['workload']:<22}{q['n']:>4}  {f['packed']:>10} {f['sequential']:>11} {f['processes']:>10}  "
              + " ".join(f"{q[k]:>7.2f}" if q[k] else f"{'-':>7}" for k in ("packed_vs_sequential",
                                                                               "packed_vs_processes"))
              + (f" {q['cpu_packed_vs_sequential']:>10.2f}" if q["cpu_packed_vs_sequential"] else f" {'-':>10}")
              + f"  {mem / 2**20 if mem else 0:>15,.0f}")


if __name__ == "__main__":
    main()
