"""Run a test worker script under torchrun (standalone, one thread per rank): shared by the parallel tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def launch_workers(worker: Path, nproc: int, names: list[str], out: Path, timeout: float) -> None:
    """`torchrun --standalone --nproc-per-node=N WORKER OUT name,...`; AssertionError with stderr on failure."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):  # torchrun sets its own; a stale one would confuse the workers
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           str(worker), str(out), ",".join(names)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        raise AssertionError(f"torchrun {nproc} ranks failed:\n{proc.stderr[-4000:]}")
