"""Weak (and optionally strong) scaling of DDP and FSDP2 through the real trainer, under torchrun.

Weak-scaling efficiency at N ranks = per-rank samples/s at N over samples/s of 1 rank, with the
same per-rank batch. On a small shared CPU box every rank is pinned to its own core with one
intra-op thread (`os.sched_setaffinity`, OMP_NUM_THREADS=1), and the 1-rank baseline is pinned the
same way, so N=2 does not borrow threads the baseline did not have. Runs alternate
(1, ddp, fsdp, 1, ddp, fsdp, ...) and the medians are reported.

DDP's exposed-communication share comes from the trainer's timed comm hook (time the backward
waited on all-reduce after its last gradient, over step time). FSDP2 has no per-bucket hook, so its
figure is the overhead share 1 - t(1 rank) / t(N ranks): every second the N-rank step spends beyond
one rank's step, an upper bound on its exposed communication.

    python benchmarks/scaling.py [--rounds 3] [--steps 30] [--strong] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORKLOAD = ["model.d_model=128", "model.n_layers=4", "model.n_heads=4", "data.n_assets=8",
            "data.n_steps=4096", "data.seq_len=64", "train.val_every=0", "train.threads=1",
            "metrics.progress=false", "metrics.flops=false", "metrics.skip_steps=5", "metrics.log_every=1000"]
# DDP buckets of 1 MB: this 0.8M-parameter model fits one 25 MB bucket, which could only start after the
# whole backward (nothing to overlap); several buckets start while earlier layers still compute.
STRATEGY = {"single": [], "ddp": ["parallel.ddp_bucket_mb={bucket}"], "fsdp": ["parallel.dp_shard={n}"]}


def worker(out: str, overrides: list[str]) -> None:
    """Inside torchrun (or alone): pin to one core, train, rank 0 writes the summary."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[local % len(cores)]})
    from stride.config import load_config
    from stride.train.trainer import Trainer

    trainer = Trainer(config=load_config(overrides=WORKLOAD + overrides), write_run_dir=False)
    summary = trainer.fit().summary
    if trainer.par.is_rank0:
        Path(out).write_text(json.dumps(summary))
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def launch(strategy: str, n: int, batch: int, steps: int, tmp: Path, bucket: float = 1.0) -> dict:
    out = tmp / f"{strategy}-{n}-{batch}.json"
    overrides = [o.format(n=n, bucket=bucket) for o in STRATEGY[strategy]]
    overrides += [f"train.batch_size={batch}", f"train.steps={steps}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(k, None)
    args = [__file__, "--worker", str(out), *overrides]
    if n == 1:
        cmd = [sys.executable, *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise RuntimeError(f"{strategy} on {n} ranks failed:\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--per-rank-batch", type=int, default=32)
    ap.add_argument("--n", type=int, default=2, help="ranks to compare against one")
    ap.add_argument("--ddp-bucket-mb", type=float, default=1.0)
    ap.add_argument("--strong", action="store_true", help="also strong scaling (fixed global batch)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker[0], a.worker[1:])
        return
    n, b = a.n, a.per_rank_batch
    runs: dict[str, list[dict]] = {"single": [], "ddp": [], "fsdp": [], "ddp_strong": [], "fsdp_strong": []}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for r in range(a.rounds):
            runs["single"].append(launch("single", 1, b, a.steps, tmp))
            for s in ("ddp", "fsdp"):
                runs[s].append(launch(s, n, b * n, a.steps, tmp, a.ddp_bucket_mb))
                if a.strong:
                    runs[f"{s}_strong"].append(launch(s, n, b, a.steps, tmp, a.ddp_bucket_mb))
            print(f"round {r + 1}/{a.rounds}: 1 rank {runs['single'][-1]['samples_per_s']:.0f} samples/s, "
                  f"ddp x{n} {runs['ddp'][-1]['samples_per_s']:.0f}, fsdp x{n} {runs['fsdp'][-1]['samples_per_s']:.0f}",
                  file=sys.stderr)

    def med(name: str, key: str) -> float:
        return statistics.median(float(s[key]) for s in runs[name])

    one = med("single", "samples_per_s")
    step1 = med("single", "step_time_s")
    res = {
        "n": n, "per_rank_batch": b, "steps": a.steps, "rounds": a.rounds,
        "pinning": "one core and one thread per rank (sched_setaffinity, OMP_NUM_THREADS=1)",
        "ddp_bucket_mb": a.ddp_bucket_mb,
        "load_avg_1min": [load_before, os.getloadavg()[0]],  # other processes on the box skew the figures
        "single_samples_per_s": one,
        f"ddp_weak_efficiency_{n}": med("ddp", "per_rank_samples_per_s") / one,
        f"fsdp_weak_efficiency_{n}": med("fsdp", "per_rank_samples_per_s") / one,
        "ddp_exposed_comm_fraction": med("ddp", "exposed_comm_fraction"),
        "ddp_hidden_comm_s": med("ddp", "comm_hidden_s"),
        "ddp_exposed_comm_s": med("ddp", "comm_exposed_s"),
        "fsdp_overhead_fraction": max(0.0, 1 - step1 / med("fsdp", "step_time_s")),
        "ddp_samples_per_s": med("ddp", "samples_per_s"),
        "fsdp_samples_per_s": med("fsdp", "samples_per_s"),
    }
    # DDP's forward has no communication: its slowdown against one rank is contention for cores and
    # memory bandwidth (other processes on the box), which the efficiency figures include.
    fwd = [float(s["step_time_breakdown_s"]["forward"]) for s in runs["ddp"]]
    fwd1 = [float(s["step_time_breakdown_s"]["forward"]) for s in runs["single"]]
    res["ddp_forward_slowdown"] = statistics.median(fwd) / statistics.median(fwd1)
    if a.strong:
        res[f"ddp_strong_speedup_{n}"] = med("ddp_strong", "samples_per_s") / one
        res[f"fsdp_strong_speedup_{n}"] = med("fsdp_strong", "samples_per_s") / one
    if not a.json:
        for k, v in res.items():
            print(f"{k:28s} {v:.3f}" if isinstance(v, float) else f"{k:28s} {v}")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
