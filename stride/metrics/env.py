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


def git_output(args: list[str], cwd: Path) -> str | None:
    """`git ARGS` run in `cwd`, its stdout stripped; None where git is missing, fails, or takes over 5 s: the
    fingerprint and `stride repro`'s edited-config message say "unknown" rather than fail on a copy without git."""
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


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
    try:
        block = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in block.splitlines()) if v}


def cpu_model() -> str:
    return _cpuinfo().get("model name") or platform.processor() or platform.machine()


def cpu_id() -> str:
    """The model name with its family and model numbers: a virtual machine's name can be generic ("Intel(R) Xeon(R)
    Processor"), and timings are quoted with the host's generation."""
    info = _cpuinfo()
    if "cpu family" in info and "model" in info:
        return f"{cpu_model()} (family {info['cpu family']} model {info['model']})"
    return cpu_model()


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
    status = git_output(["status", "--porcelain"], repo)
    return {
        "git_commit": git_output(["rev-parse", "HEAD"], repo),
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
