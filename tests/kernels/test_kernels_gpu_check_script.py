"""benchmarks/gpu_check.sh, the prepared GPU check: it parses, refuses bad arguments, exits cleanly
without a GPU, and its CPU dry run runs every step it has a CPU form for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def run(*args: str, timeout: float = 60, tmp: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "OUT")}
    env["PYTHON"] = sys.executable
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=tmp or ROOT)


def test_script_parses():
    r = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_unknown_argument_is_named():
    r = run("--budget", "5")
    assert r.returncode == 2 and "unknown argument '--budget'" in r.stderr


def test_skip_leaves_the_named_steps_out(tmp_path):
    every = "trainer,checkpoint,data,data_device,kernels,optimizers,sweep"
    r = run("--cpu-dry-run", "--skip", every, "--out", str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    summary = (tmp_path / "summary.txt").read_text()
    for step in every.split(","):
        assert f"[{step}] skipped: --skip" in summary and not (tmp_path / f"{step}.log").exists(), step


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU exit")
def test_without_gpu_it_says_so_and_exits_0(tmp_path):
    r = run("--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "no CUDA GPU visible" in r.stdout
    assert "no CUDA GPU visible" in (tmp_path / "summary.txt").read_text()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is the CPU form")
def test_cpu_dry_run_runs_every_step(tmp_path):
    r = run("--cpu-dry-run", "--out", str(tmp_path), timeout=900)
    assert r.returncode == 0, r.stderr
    summary = (tmp_path / "summary.txt").read_text()
    for step in ("trainer", "checkpoint", "data", "data_device", "kernels", "optimizers", "sweep"):
        assert f"[{step}] rc=0" in summary, summary
    trainer = (tmp_path / "trainer.log").read_text()
    assert "fp32-torch-adamw {" in trainer and "bf16-triton-adamw8bit {" in trainer
    assert '"async_stall_fraction"' in (tmp_path / "checkpoint.log").read_text()
    assert '"speedup_vs_torch_dataloader"' in (tmp_path / "data.log").read_text()
    device = json.loads((tmp_path / "data_device.log").read_text().strip().splitlines()[-1])
    assert device["device_type"] == "cpu" and device["by_batch"]["64"]["gather_fraction_of_copy_large"] > 0
    # the kernels table is printed last, with the 8-bit kernel's rows
    tail = r.stdout.strip().splitlines()[-12:]
    assert any("stride-8bit " in line for line in tail) and any("stride-8bit-torch" in line for line in tail)
