"""Step time of each pipeline schedule at 2 ranks against one rank, through the real trainer.

Every run trains the same model on the same global batch (a pipeline does not split the data):
one rank alone, then pp=2 with each schedule over the same number of microbatches. Each rank is
pinned to its own core with one intra-op thread (`os.sched_setaffinity`, OMP_NUM_THREADS=1), like
the 1-rank baseline, and runs alternate (single, gpipe, 1f1b, ..., single, gpipe, ...); medians
are reported. Speedup = t(1 rank) / t(pp=2), so 2.0 would be a perfect split with no bubble;
"vs mb" divides by one rank accumulating over the same microbatches (`train.grad_accum` = the
microbatch count), which takes out what smaller matrix products cost on their own.

The breakdown is the trainer's under pp: `forward` and `backward` are the time this rank spent in
its stages' compute chunks, `pipeline_wait` the rest of the schedule (bubble, transfers, loss).
`bubble_theory` is the idle share of an ideal schedule with equal forward and backward times:
(p-1)/(m+p-1) for GPipe and 1F1B, (p-1)/(v*m+p-1) for interleaved 1F1B with v stages per rank.

    .venv/bin/python benchmarks/pipeline_schedules.py [--rounds 3] [--steps 20] [--microbatches 8] [--json]
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

WORKLOAD = ["model.d_model=128", "model.n_layers=8", "model.n_heads=4", "data.n_assets=8",
            "data.n_steps=4096", "data.seq_len=64", "train.val_every=0", "train.threads=1",
            "metrics.progress=false", "metrics.flops=false", "metrics.skip_steps=5", "metrics.log_every=1000"]
SCHEDULES = ["gpipe", "1f1b", "interleaved_1f1b", "zero_bubble", "zbv"]


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


def launch(name: str, args: argparse.Namespace, tmp: Path) -> dict:
    out = tmp / f"{name}.json"
    overrides = [f"train.batch_size={args.batch}", f"train.steps={args.steps}"]
    if name == "single_mb":  # one rank, the pipeline's microbatch size (gradient accumulation)
        overrides.append(f"train.grad_accum={args.microbatches}")
    elif name != "single":
        overrides += ["parallel.pp=2", f"parallel.pp_schedule='{name}'", f"parallel.microbatches={args.microbatches}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        env.pop(k, None)
    cmd = [sys.executable, __file__, "--worker", str(out), *overrides]
    if not name.startswith("single"):
        cmd[1:1] = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode:
        raise RuntimeError(f"{name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def bubble_theory(name: str, p: int, m: int) -> float | None:
    v = 2 if name == "interleaved_1f1b" else 1
    return (p - 1) / (v * m + p - 1) if name in ("gpipe", "1f1b", "interleaved_1f1b") else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--schedules", default=",".join(SCHEDULES))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1:])
        return
    names = ["single", "single_mb", *args.schedules.split(",")]
    load_before = os.getloadavg()[0]
    times: dict[str, list[float]] = {n: [] for n in names}
    parts: dict[str, list[dict]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for name in names:
                s = launch(name, args, Path(tmp))
                times[name].append(s["step_time_s"])
                parts[name].append(s["step_time_breakdown_s"])
    load_after = os.getloadavg()[0]
    single, single_mb = statistics.median(times["single"]), statistics.median(times["single_mb"])
    rows = {}
    print(f"{'schedule':<18}{'step ms':>9}{'speedup':>9}{'vs mb':>9}{'fwd ms':>8}{'bwd ms':>8}{'wait ms':>9}"
          f"{'wait %':>8}{'bubble theory':>15}")
    for name in names:
        t = statistics.median(times[name])
        med = {k: statistics.median(p.get(k, 0.0) for p in parts[name])
               for k in ("forward", "backward", "pipeline_wait")}
        pp = not name.startswith("single")
        theory = bubble_theory(name, 2, args.microbatches) if pp else None
        rows[name] = {"step_time_s": t, "speedup_vs_1_rank": single / t, "speedup_vs_1_rank_same_microbatch":
                      single_mb / t, **{f"{k}_s": v for k, v in med.items()},
                      "wait_fraction": med["pipeline_wait"] / t if pp else None,
                      "bubble_theory": theory, "step_times_s": times[name]}
        wait = f"{100 * med['pipeline_wait'] / t:7.1f}%" if pp else f"{'-':>8}"
        print(f"{name:<18}{1e3 * t:9.1f}{single / t:9.2f}{single_mb / t:9.2f}{1e3 * med['forward']:8.1f}"
              f"{1e3 * med['backward']:8.1f}{1e3 * med['pipeline_wait']:9.1f}{wait}"
              f"{(f'{100 * theory:.1f}%' if theory else '-'):>15}")
    print(f"load average {load_before:.2f} before, {load_after:.2f} after; {args.rounds} rounds, median shown")
    if args.json:
        print(json.dumps({"microbatches": args.microbatches, "batch": args.batch, "rounds": args.rounds,
                          "load_avg": [load_before, load_after], "schedules": rows}))


if __name__ == "__main__":
    main()
