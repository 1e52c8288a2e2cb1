"""Environment fingerprint: what ran where, so a result can be reproduced or explained; and the cores this
process may run on (the one affinity helper the benchmarks, pinning and checkpoint staging share)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

PACKAGES = ("torch", "numpy", "triton", "pyarrow", "rich", "stride")


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def available_cores() -> tuple[int, ...]:
    """Cores this process may run on (its affinity mask; all CPUs where the OS has no affinity call)."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint() -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[2]
    versions = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = None
    gpus = []
    if torch.cuda.is_available():
        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    status = _git(["status", "--porcelain"], repo)
    return {
        "git_commit": _git(["rev-parse", "HEAD"], repo),
        "git_dirty": bool(status) if status is not None else None,
        "python": platform.python_version(),
        "packages": versions,
        "torch_cuda": torch.version.cuda,
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "gpus": gpus,
    }
