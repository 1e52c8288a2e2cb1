"""Weak and strong scaling of DDP and FSDP2 through the real trainer at 1, 2 and 4 ranks, and why.

The figures come from the same code as `stride bench --sweep world` (stride.bench.world): each point
is `stride train` under torchrun (the launcher of `stride train --nproc`), one intra-op thread per
rank, rank r pinned to core r (the 1-rank baseline pinned the same way), repeated in alternating
rounds. Weak efficiency = per-rank throughput at N / throughput of 1 rank (same per-rank batch);
strong efficiency = throughput at N / (N x throughput of 1) (same global batch). On a 2-core box
N=4 puts two ranks on each core: those figures are flagged `oversubscribed` and measure time-sharing.

DDP's exposed-communication share comes from the trainer's timed comm hook (time the backward
waited on all-reduce after its last gradient, over step time). FSDP2 has no per-bucket hook, so its
figure is the overhead share 1 - efficiency: every second the N-rank step spends beyond one rank's,
an upper bound on its exposed communication.

`--diagnose` explains the DDP weak-scaling gap at N=2 with control runs, alternated in rounds:
  single        1 rank (the baseline)
  independent2  2 unconnected 1-rank trainers at once on cores 0 and 1: contention alone, no DDP
  ddp_nocomm    DDP whose comm hook returns the local gradient (no all-reduce): contention + DDP's
                bucketing, without communication
  ddp           DDP, 1 MB buckets (the headline configuration)
  ddp_25mb      one 25 MB bucket: the all-reduce starts after the whole backward (no overlap)
  ddp_static    1 MB buckets, static_graph=true
  ddp_nobcast   1 MB buckets, forward_sync_buffers=False: DDP by default broadcasts the module's buffers
                from rank 0 at the start of every forward (the transformer's RoPE tables), a blocking
                collective that makes forward a synchronisation point; the time spent in it is
                measured in every DDP run (`buffer_sync_s`)
and, for every run, the scheduler's own accounting of the timed steps from /proc/self/task/*/schedstat:
the training thread's CPU time, its run-queue wait (runnable but another task had the core), the
time it was blocked (waiting on a collective or the data prefetch thread), and the CPU time of every
other thread (gloo's, the data prefetch thread, the system sampler) that shares the rank's one core.
From those, step by step, `contention_free_step_s` estimates the step with the cores to ourselves
(see `_contention_free_step`) and `contention_free_efficiency` the efficiency it implies: on a shared
machine the wall-clock efficiency mostly measures other people's load, this does not.
A micro-benchmark of a cache-resident matmul and a memory-bound copy in 1 and 2 pinned processes at
once separates core time-sharing from memory-bandwidth contention.

    .venv/bin/python benchmarks/scaling.py [--rounds 3] [--steps 30] [--world-sizes 1,2,4] [--diagnose] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ["model.d_model=128", "model.n_layers=4", "model.n_heads=4", "data.n_assets=8",
            "data.n_steps=4096", "data.seq_len=64", "train.val_every=0",
            "metrics.progress=false", "metrics.flops=false", "metrics.skip_steps=5", "metrics.log_every=1000"]
# Diagnostic variants at N=2 (weak): extra overrides, and whether the ranks form one DDP group.
VARIANTS: dict[str, tuple[int, list[str]]] = {
    "single": (1, []),
    "independent2": (2, []),
    "ddp_nocomm": (2, ["parallel.dp_replicate=2"]),
    "ddp": (2, ["parallel.dp_replicate=2"]),
    "ddp_25mb": (2, ["parallel.dp_replicate=2", "parallel.ddp_bucket_mb=25"]),
    "ddp_static": (2, ["parallel.dp_replicate=2", "parallel.static_graph=true"]),
    "ddp_nobcast": (2, ["parallel.dp_replicate=2"]),
}


# --------------------------------------------------------------------------------------------------
# Inside a rank (diagnostic runs and the micro-benchmark): pin first, import torch after.
# --------------------------------------------------------------------------------------------------
def _schedstat() -> dict[int, tuple[str, float, float]]:
    """{tid: (thread name, seconds on CPU, seconds waiting on a run queue)} for this process's threads."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                run_ns, wait_ns, _ = f.read().split()
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        out[int(tid)] = (name, int(run_ns) / 1e9, int(wait_ns) / 1e9)
    return out


def _main_thread_stat(tid: int) -> tuple[float, float]:
    """(seconds on CPU, seconds waiting on a run queue) of one thread."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        run_ns, wait_ns, _ = f.read().split()
    return int(run_ns) / 1e9, int(wait_ns) / 1e9


def _thread_accounting(before: dict, after: dict, steps: list[tuple[float, float, float]], main_tid: int
                       ) -> dict[str, Any]:
    """Per timed step: the training thread's wall, CPU, run-queue wait and blocked time (lists, one per
    step, so ranks can be lined up step by step); other threads' CPU per step, by name."""
    n = len(steps)
    others: dict[str, float] = {}
    for tid, (name, r1, _) in after.items():
        if tid != main_tid:
            others[name] = others.get(name, 0.0) + (r1 - before.get(tid, ("", 0.0, 0.0))[1]) / n
    wall = [w for w, _, _ in steps]
    cpu = [c for _, c, _ in steps]
    wait = [q for _, _, q in steps]
    blocked = [max(0.0, w - c - q) for w, c, q in steps]
    return {"steps": n, "wall": wall, "cpu": cpu, "runqueue_wait": wait, "blocked": blocked,
            "wall_s": sum(wall) / n, "main_cpu_s": sum(cpu) / n, "main_runqueue_wait_s": sum(wait) / n,
            "main_blocked_s": sum(blocked) / n, "other_threads_cpu_s": others, "other_cpu_s": sum(others.values())}


def diag_worker(out: str, variant: str, overrides: list[str]) -> None:
    """One rank of a diagnostic run; every rank writes its summary and thread accounting to `out.<rank>`."""
    from stride.bench.pinning import pin_from_env

    core = pin_from_env()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if variant == "independent2":  # two unconnected trainers: hide the launcher's world from each
        for k in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            os.environ.pop(k, None)
        os.environ["WORLD_SIZE"] = "1"
    import threading

    import torch

    if variant == "ddp_nocomm":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def no_comm(process_group: Any, bucket: Any) -> torch.futures.Future:
            fut: torch.futures.Future = torch.futures.Future()
            fut.set_result(bucket.buffer())  # the local gradient, not reduced: DDP's bookkeeping, no network
            return fut

        default_hooks.allreduce_hook = no_comm  # stride.parallel.comm_hooks looks it up at registration

    from torch.nn.parallel import DistributedDataParallel

    import stride.parallel.data_parallel as data_parallel

    buffer_sync = [0.0]  # seconds in DDP's pre-forward buffer broadcast, since the last reset
    sync_buffers = DistributedDataParallel._sync_buffers

    def timed_sync_buffers(self: Any) -> None:
        t0 = time.perf_counter()
        sync_buffers(self)
        buffer_sync[0] += time.perf_counter() - t0

    DistributedDataParallel._sync_buffers = timed_sync_buffers
    if variant == "ddp_nobcast":

        class NoBufferBroadcastDDP(DistributedDataParallel):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **{**kwargs, "forward_sync_buffers": False})

        data_parallel.DDP = NoBufferBroadcastDDP  # apply_ddp constructs it by this module-level name

    from stride.config import load_config
    from stride.train.callbacks import Callback
    from stride.train.trainer import Trainer

    cfg = load_config(overrides=WORKLOAD + overrides)

    class Accounting(Callback):
        """Scheduler accounting of the training thread step by step over the timed steps, and of the
        other threads over the whole timed span (after warm-up, before the last step's log all-reduce)."""

        def __init__(self) -> None:
            self.before: dict = {}
            self.last = (0.0, 0.0, 0.0)
            self.steps: list[tuple[float, float, float]] = []
            self.result: dict[str, Any] = {}
            self.buffer_sync_s = 0.0

        def on_step_end(self, trainer: Trainer) -> None:
            tid = threading.get_native_id()
            now = (time.perf_counter(), *_main_thread_stat(tid))
            if cfg.metrics.skip_steps < trainer.step < cfg.train.steps:
                self.steps.append(tuple(b - a for a, b in zip(self.last, now, strict=True)))  # type: ignore[arg-type]
            self.last = now
            if trainer.step == cfg.metrics.skip_steps:
                self.before, buffer_sync[0] = _schedstat(), 0.0
            elif trainer.step == cfg.train.steps - 1:
                self.result = _thread_accounting(self.before, _schedstat(), self.steps, tid)
                self.buffer_sync_s = buffer_sync[0] / len(self.steps)

    acc = Accounting()
    trainer = Trainer(config=cfg, write_run_dir=False, callbacks=[acc])
    summary = trainer.fit().summary
    summary.update(threads=acc.result, pinned_core=core, intraop_threads=torch.get_num_threads(),
                   buffer_sync_s=acc.buffer_sync_s)
    Path(f"{out}.{local}").write_text(json.dumps(summary))
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def micro_worker(out: str, iters: int) -> None:
    """A cache-resident matmul and a memory-bound copy, timed; every rank starts together (gloo barrier)."""
    from stride.bench.pinning import pin_from_env

    pin_from_env()
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    n = int(os.environ.get("WORLD_SIZE", "1"))
    if n > 1:
        dist.init_process_group("gloo")
    a, b = torch.randn(128, 128), torch.randn(128, 128)  # 64 KiB each: stays in L1/L2
    big_src, big_dst = torch.randn(16 * 2**20), torch.empty(16 * 2**20)  # 64 MiB each: memory bound
    res = {}
    kernels = (("matmul_128_cache", lambda: a @ b, 200), ("copy_64MiB_memory", lambda: big_dst.copy_(big_src), 2))
    for name, fn, reps in kernels:
        for _ in range(3):
            fn()
        wall, cpu = [], []
        for _ in range(iters):
            if n > 1:
                dist.barrier()
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(reps):
                fn()
            wall.append((time.perf_counter() - t0) / reps)
            cpu.append((time.thread_time() - c0) / reps)  # on-CPU time: blind to run-queue waits
        res[name] = {"wall_s": statistics.median(wall), "cpu_s": statistics.median(cpu)}
    if int(os.environ.get("RANK", "0")) == 0:
        Path(out).write_text(json.dumps(res))
    if n > 1:
        dist.destroy_process_group()


# --------------------------------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------------------------------
def launch(entry_args: list[str], n: int, timeout_s: float = 900) -> None:
    """Run this script's worker on `n` ranks with the sweep's launcher and core plan."""
    import subprocess

    from stride.bench.pinning import core_plan
    from stride.bench.world import rank_command, rank_env

    cmd = rank_command([__file__, *entry_args], n)
    proc = subprocess.run(cmd, env=rank_env(core_plan(n), 1), capture_output=True, text=True, timeout=timeout_s,
                          cwd=ROOT, check=False)
    if proc.returncode:
        raise RuntimeError(f"{entry_args[:3]} on {n} ranks failed:\n{proc.stderr[-3000:]}")


def run_diagnose(rounds: int, steps: int, batch: int, tmp: Path) -> dict[str, Any]:
    """Each variant once per round (order reversed on odd rounds); figures averaged over ranks, median over rounds."""
    runs: dict[str, list[list[dict]]] = {v: [] for v in VARIANTS}  # variant -> rounds -> ranks' summaries
    names = list(VARIANTS)
    for r in range(rounds):
        for v in names if r % 2 == 0 else names[::-1]:
            n, ov = VARIANTS[v]
            bucket = [] if any("ddp_bucket_mb" in o for o in ov) else ["parallel.ddp_bucket_mb=1"]
            global_batch = batch * (n if v.startswith("ddp") else 1)  # weak: the same batch per rank
            out = tmp / f"diag-{v}-{r}"
            launch(["--diag", str(out), v, *ov, *bucket, "train.threads=1", f"train.batch_size={global_batch}",
                    f"train.steps={steps}"], n)
            runs[v].append([json.loads(f.read_text()) for f in sorted(tmp.glob(f"diag-{v}-{r}.*"))])
        print(f"diagnose round {r + 1}/{rounds} done", file=sys.stderr)

    def per_rank(s: dict) -> float:
        return s["per_rank_samples_per_s"] or s["samples_per_s"]

    def avg(ranks: list[dict], get: Any) -> float:
        return statistics.fmean(get(s) for s in ranks)

    base = [avg(rk, per_rank) for rk in runs["single"]]
    fwd1 = statistics.median(avg(rk, lambda s: s["step_time_breakdown_s"]["forward"]) for rk in runs["single"])
    out: dict[str, Any] = {}
    for v, rounds_ in runs.items():
        eff = [avg(rk, per_rank) / b for rk, b in zip(rounds_, base, strict=True)]

        def med(get: Any, rounds_: list = rounds_) -> float:
            return statistics.median(avg(rk, get) for rk in rounds_)

        others: dict[str, float] = {}
        for rk in rounds_:
            for s in rk:
                for name, sec in s["threads"]["other_threads_cpu_s"].items():
                    others[name] = others.get(name, 0.0) + sec / (len(rounds_) * len(rk))
        out[v] = {
            "ranks": len(rounds_[0]),
            "weak_efficiency": statistics.median(eff), "efficiency_rounds": [round(e, 3) for e in eff],
            "step_time_s": med(lambda s: s["step_time_s"]),
            "breakdown_s": {k: round(med(lambda s, k=k: s["step_time_breakdown_s"][k]), 5)
                            for k in rounds_[0][0]["step_time_breakdown_s"]},
            "forward_slowdown": med(lambda s: s["step_time_breakdown_s"]["forward"]) / fwd1,
            "exposed_comm_fraction": med(lambda s: s["exposed_comm_fraction"] or 0.0) if v.startswith("ddp") else None,
            "comm_exposed_s": med(lambda s: s["comm_exposed_s"] or 0.0) if v.startswith("ddp") else None,
            "comm_hidden_s": med(lambda s: s["comm_hidden_s"] or 0.0) if v.startswith("ddp") else None,
            # per timed step, from the scheduler (/proc/self/task/*/schedstat), averaged over ranks
            "main_cpu_s": med(lambda s: s["threads"]["main_cpu_s"]),
            "main_runqueue_wait_s": med(lambda s: s["threads"]["main_runqueue_wait_s"]),
            "main_blocked_s": med(lambda s: s["threads"]["main_blocked_s"]),
            "other_threads_cpu_s": med(lambda s: s["threads"]["other_cpu_s"]),
            "other_threads_by_name": {k: round(x, 5) for k, x in sorted(others.items(), key=lambda kv: -kv[1])[:6]},
            "buffer_sync_s": med(lambda s: s.get("buffer_sync_s") or 0.0) if v.startswith("ddp") else None,
            "contention_free_step_s": statistics.median(_contention_free_step(rk, v == "independent2")
                                                        for rk in rounds_),
            "pinned_cores": [s.get("pinned_core") for s in rounds_[0]],
            "intraop_threads": rounds_[0][0].get("intraop_threads"),
        }
    one = out["single"]["contention_free_step_s"]
    for v in out.values():
        v["contention_free_efficiency"] = one / v["contention_free_step_s"]
    return out


def _contention_free_step(ranks: list[dict], independent: bool) -> float:
    """Estimated step time with every rank's core to itself (run-queue waits, i.e. other processes,
    removed), from the scheduler's per-step accounting of each rank's training thread.

    Ranks synchronise every step, so a step lasts as long as its slowest rank's CPU work plus the
    communication nobody could hide. The last rank to arrive at a collective waits only for the
    collective itself; the others also wait for it (skew, often because it was descheduled). So per
    step: max over ranks of CPU time + min over ranks of blocked time; plus the other threads' CPU
    (gloo, data prefetch) that shares each rank's core. Independent trainers do not synchronise: their
    own CPU + blocked + other threads, averaged.
    """
    th = [s["threads"] for s in ranks]
    other = statistics.fmean(t["other_cpu_s"] for t in th)
    if independent or len(th) == 1:
        return statistics.fmean(t["main_cpu_s"] + t["main_blocked_s"] for t in th) + other
    n = min(len(t["cpu"]) for t in th)
    per_step = [max(t["cpu"][k] for t in th) + min(t["blocked"][k] for t in th) for k in range(n)]
    return sum(per_step) / n + other


def run_micro(rounds: int, tmp: Path) -> dict[str, Any]:
    """Per kernel: time per call in 1 process and in each of 2 at once (pinned to cores 0 and 1), wall and CPU."""
    one: dict[str, list[dict]] = {}
    two: dict[str, list[dict]] = {}
    for r in range(rounds):
        for n, store in ((1, one), (2, two)) if r % 2 == 0 else ((2, two), (1, one)):
            out = tmp / f"micro-{n}-{r}.json"
            launch(["--micro", str(out), "15"], n)
            for k, v in json.loads(out.read_text()).items():
                store.setdefault(k, []).append(v)
    res = {}
    for k in one:
        pairs = list(zip(one[k], two[k], strict=True))
        res[k] = {"one_process_cpu_s": statistics.median(a["cpu_s"] for a in one[k]),
                  "wall_slowdown_at_2": statistics.median(b["wall_s"] / a["wall_s"] for a, b in pairs),
                  "cpu_slowdown_at_2": statistics.median(b["cpu_s"] / a["cpu_s"] for a, b in pairs),
                  "cpu_slowdown_rounds": [round(b["cpu_s"] / a["cpu_s"], 3) for a, b in pairs]}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--per-rank-batch", type=int, default=32)
    ap.add_argument("--world-sizes", default="1,2,4", help="process counts (N > cores is flagged oversubscribed)")
    ap.add_argument("--scaling", default="weak,strong")
    ap.add_argument("--strategies", default="ddp,fsdp")
    ap.add_argument("--ddp-bucket-mb", type=float, default=1.0)
    ap.add_argument("--strong", action="store_true", help=argparse.SUPPRESS)  # strong is in --scaling by default
    ap.add_argument("--diagnose", action="store_true", help="control runs that explain the DDP gap at N=2")
    ap.add_argument("--no-sweep", action="store_true", help="only --diagnose")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--diag", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    ap.add_argument("--micro", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.diag:
        diag_worker(a.diag[0], a.diag[1], a.diag[2:])
        return
    if a.micro:
        micro_worker(a.micro[0], int(a.micro[1]))
        return

    from stride.bench.workloads import Workload
    from stride.bench.world import world_sweep
    from stride.metrics.env import available_cores

    sizes = [int(x) for x in a.world_sizes.split(",")]
    cores = len(available_cores())
    load_before = os.getloadavg()[0]
    b = a.per_rank_batch
    res: dict[str, Any] = {
        "per_rank_batch": b, "steps": a.steps, "rounds": a.rounds, "cores": cores, "ddp_bucket_mb": a.ddp_bucket_mb,
        "pinning": "one core and one intra-op thread per rank (stride.bench.pinning), baseline pinned too",
    }
    tmp = Path(tempfile.mkdtemp(prefix="stride-scaling-"))  # kept when a run fails: its logs are there
    try:
        if not a.no_sweep:
            w = Workload("scaling_transformer", 1, "ts transformer d=128 L=4 seq 64", tuple(WORKLOAD))
            extra = [f"train.steps={a.steps}", f"train.batch_size={b}", f"parallel.ddp_bucket_mb={a.ddp_bucket_mb}"]
            _, points, plans = world_sweep(w, "cpu", tmp / "sweep", sizes, a.strategies.split(","),
                                           a.scaling.split(","), extra, a.rounds,
                                           log=lambda m: print(m, file=sys.stderr))
            base = next(p for p in points if p["scaling"] == "baseline")
            res["single_samples_per_s"] = base["throughput"]["median"]
            # share of its runnable time a rank waited for a core (other processes): the wall-clock
            # figures below mean something only where this is small for the baseline and the N-rank runs
            res["single_runqueue_wait_share"] = base["runqueue_wait_share"]
            for p in points:
                if p["scaling"] == "baseline":
                    continue
                key = f"{p['strategy']}_{p['scaling']}"
                n = p["world_size"]
                res[f"{key}_efficiency_{n}"] = p["efficiency"]
                res[f"{key}_efficiency_{n}_rounds"] = [round(e, 3) for e in p["efficiency_rounds"]]
                res[f"{key}_samples_per_s_{n}"] = p["throughput"]["median"]
                res[f"{key}_runqueue_wait_share_{n}"] = p["runqueue_wait_share"]
                if p["scaling"] == "strong":
                    res[f"{key}_speedup_{n}"] = p["speedup"]
                if p["strategy"] == "ddp":
                    res[f"{key}_exposed_comm_fraction_{n}"] = p["exposed_comm_fraction"]
                    res[f"{key}_forward_per_sample_ratio_{n}"] = p["forward_time_per_sample_ratio"]
                if p["oversubscribed"]:
                    res[f"oversubscribed_{n}"] = f"{n} ranks on {cores} cores: ranks time-share cores"
            # Headline keys (issue 4), kept from the first version of this script.
            if "ddp_weak_efficiency_2" in res:
                res["ddp_exposed_comm_fraction"] = res["ddp_weak_exposed_comm_fraction_2"]
                res["ddp_forward_slowdown"] = res["ddp_weak_forward_per_sample_ratio_2"]
            if "fsdp_weak_efficiency_2" in res:
                res["fsdp_overhead_fraction"] = 1 - res["fsdp_weak_efficiency_2"]
            res["pinning_by_world_size"] = {str(n): p.describe() for n, p in sorted(plans.items())}
        if a.diagnose:
            res["diagnose"] = diag = run_diagnose(a.rounds, a.steps, b, tmp)
            res["micro"] = run_micro(max(a.rounds, 3), tmp)
            # An estimate, not a wall-clock measurement: the step with other processes' run-queue time removed.
            res["ddp_contention_free_efficiency_2"] = diag["ddp"]["contention_free_efficiency"]
            res["independent2_contention_free_efficiency"] = diag["independent2"]["contention_free_efficiency"]
            res["diagnose_single_runqueue_wait_share"] = diag["single"]["main_runqueue_wait_s"] / (
                diag["single"]["main_runqueue_wait_s"] + diag["single"]["main_cpu_s"])
    except Exception:
        print(f"scaling: logs kept in {tmp}", file=sys.stderr)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    res["load_avg_1min"] = [load_before, os.getloadavg()[0]]  # other processes on the box skew the figures
    if not a.json:
        for k, v in res.items():
            print(f"{k:36s} {v:.3f}" if isinstance(v, float) else f"{k:36s} {v}")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
