"""Small measured `stride train` runs on this machine, for calibrating and checking the model.

One process, or N processes under torchrun (gloo), each pinned to its own core with one intra-op
thread (FACTS.md: the only fair comparison on a small shared CPU box). Rank 0 writes the run
directory (config.toml, summary.json); every rank adds `rank<r>.json` with what the model predicts
per rank and the trainer does not report: parameter, gradient and optimizer-state bytes held
locally (FSDP2 shards included), and the median step time (robust to a busy machine's outliers,
where summary.json has the mean).

    python -m stride.perfmodel.local_runs [--nproc N] OUT_DIR key=value ...   (options before OUT_DIR)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from stride.files.rank_share import PINNED_APART_ENV
from stride.metrics.env import available_cores

BASE = ["train.threads=1", "metrics.progress=false", "metrics.log_every=1", "train.val_every=0",
        "metrics.skip_steps=3"]


def _local_bytes(t: torch.Tensor) -> int:
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        t = t.to_local()
    return t.numel() * t.element_size()


def pin_core(local_rank: int = 0) -> None:
    """One core per process, as FACTS.md's scaling figures are measured."""
    if hasattr(os, "sched_setaffinity"):
        cores = available_cores()
        os.sched_setaffinity(0, {cores[local_rank % len(cores)]})
        os.environ[PINNED_APART_ENV] = "1"


def nice_session() -> None:
    """preexec_fn of a measured subprocess: its own session, niced to -20 where allowed.

    On a machine shared with other jobs a nice-0 process gets a fraction of its core: measured
    here at load 13-21 on 2 cores, a 0.077 s (CPU) training step took 0.40-0.47 s of wall time.
    Linux autogroups (`sched_autogroup_enabled`) weigh sessions equally and apply `nice` only inside
    one, so the measured process tree gets a session of its own and that autogroup is niced; it
    ends with the tree. With it the same step took 0.081 s of wall time. STRIDE_MEASURE_NICE=0 turns
    it off; without root it changes nothing."""
    if os.environ.get("STRIDE_MEASURE_NICE", "1") == "0":
        return
    with contextlib.suppress(OSError):
        os.setsid()
    if os.getsid(0) != os.getpid():
        return  # a process-group leader cannot start a session: never nice a shared autogroup
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, -20)
        Path("/proc/self/autogroup").write_text("-20")


def run_niced(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, preexec_fn=nice_session)


def worker(out: Path, overrides: list[str]) -> None:
    pin_core(int(os.environ.get("LOCAL_RANK", "0")))
    nice_session()  # torchrun starts each worker in a session of its own: nice that one too
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    import torch.distributed as dist

    from stride.config import load_config
    from stride.train.callbacks import Callback, TrainerView
    from stride.train.trainer import Trainer

    grads: dict[str, int] = {"bytes": 0}
    cpu_times: list[float] = []

    class GradBytes(Callback):
        """Gradient bytes held just before the first optimizer step (sharded under FSDP2)."""

        def on_fit_start(self, trainer: TrainerView) -> None:
            params = [p for p in trainer.model.parameters() if p.requires_grad]
            seen: set[int] = set()

            def hook(p: torch.Tensor) -> None:
                if id(p) not in seen and p.grad is not None:
                    seen.add(id(p))
                    grads["bytes"] += _local_bytes(p.grad)

            for p in params:
                p.register_post_accumulate_grad_hook(hook)
            cpu_times.append(time.process_time())

        def on_step_end(self, trainer: TrainerView) -> None:
            cpu_times.append(time.process_time())

    cfg = load_config(overrides=BASE + overrides)
    trainer = Trainer(config=cfg, out=out, callbacks=[GradBytes()])
    result = trainer.fit()
    times = [r["step_time_s"] for r in trainer.history if "step_time_s" in r and r["step"] > cfg.metrics.skip_steps]
    rank = dist.get_rank() if dist.is_initialized() else 0
    cpu_steps = [b - a for a, b in zip(cpu_times, cpu_times[1:], strict=False)][cfg.metrics.skip_steps:]
    record = {
        "rank": rank, "world_size": result.summary["world_size"], "niceness": niceness,
        "median_step_time_s": statistics.median(times) if times else None, "step_times_s": times,
        # process CPU seconds per step (compute + gloo threads), steps after the warm-up
        "median_step_cpu_s": statistics.median(cpu_steps) if cpu_steps else None,
        "param_bytes": sum(_local_bytes(p) for p in trainer.model.parameters()),
        "grad_bytes": grads["bytes"],
        "optimizer_state_bytes": sum(_local_bytes(v) for s in trainer.optimizer.state.values() for v in s.values()
                                     if isinstance(v, torch.Tensor)),
        "saved_activation_bytes": trainer.saved_activation_bytes,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    if dist.is_initialized():
        dist.barrier()
        # the trainer (an FSDP2 model's meshes hold its gloo groups) goes before the groups do, and is collected
        # now: left to interpreter exit, a gloo thread was ended by the finalizing interpreter and rank 1 died of
        # std::terminate after a finished run (SIGABRT, 2 of 36 FSDP2 runs of the local check), as stride train's
        # release_process_groups explains
        del trainer, result
        dist.destroy_process_group()
        gc.collect()


def launch(out: Path, overrides: list[str], nproc: int = 1, timeout: float = 900) -> dict:
    """Run one measured training job; returns rank 0's record merged with summary.json."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    args = ["-m", "stride.perfmodel.local_runs", "--worker", str(out), *overrides]
    if nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    else:
        cmd = [sys.executable, *args]
    proc = run_niced(cmd, env, timeout)
    if proc.returncode:
        raise RuntimeError(f"measured run ({nproc} process(es), {overrides}) failed:\n{proc.stderr[-3000:]}")
    rec = json.loads((out / "rank0.json").read_text())
    rec["summary"] = json.loads((out / "summary.json").read_text())
    rec["ranks"] = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    return rec


def comm_profile(out: Path, nproc: int = 2, max_bytes: str = "16M", timeout: float = 300) -> Path:
    """`stride comm` over `nproc` gloo processes, each pinned to its own core and niced like the
    training runs (so gloo's threads share the core as they do in training), as a profile TOML. Up to 16 MB:
    to 4 MB the times are mostly gloo's start-up (1-2 ms, +-0.5 ms between sizes), and the fit that separates
    bandwidth from it was left out as noise (R^2 under 0.8) for the all-reduce and all-gather in most runs
    here; to 16 MB both resolved (R^2 0.99 and 0.89, Intel Xeon, 2 cores, load 0.2)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    comm_args = ["comm", "--collectives", "all_reduce,all_gather,reduce_scatter", "--min-bytes", "4K",
                 "--max-bytes", max_bytes, "--factor", "4", "--iters", "20", "--repeats", "5", "--backend", "gloo",
                 "--profile-out", str(out)]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "stride.perfmodel.local_runs", "--comm-worker", str(out), *comm_args]
    proc = run_niced(cmd, env, timeout)
    if proc.returncode or not out.is_file():
        raise RuntimeError(f"stride comm failed:\n{proc.stderr[-3000:]}")
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--comm-worker"]:  # [--comm-worker OUT stride-comm-args...] under torchrun
        pin_core(int(os.environ.get("LOCAL_RANK", "0")))
        nice_session()
        from stride.cli.main import main as stride_main

        return stride_main(argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    if args.worker:
        worker(Path(args.out), args.overrides)
        return 0

    print(json.dumps(launch(Path(args.out), args.overrides, args.nproc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
