"""benchmarks/kernels.py on a machine without a GPU: a clean exit, and every code path on tiny shapes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU exit")
def test_exits_cleanly_without_gpu():
    r = subprocess.run([sys.executable, str(SCRIPT), "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "no CUDA GPU" in r.stdout
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"skipped": True, "reason": "no CUDA GPU"}


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the smoke run is for CPU machines")
def test_cpu_smoke_runs_every_implementation_including_triton():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, str(SCRIPT), "--cpu-smoke", "--json"], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    rows = out["rows"]
    assert not [row for row in rows if row["ms"] is None], [row["note"] for row in rows if row["ms"] is None]
    ops = {row["op"] for row in rows if row["impl"] == "stride-triton"}
    assert ops == {"rms_norm", "layer_norm", "swiglu", "rope", "ts_loss", "linear_ce"}
    # every stride kernel agrees with eager on the benchmark's own inputs (bf16)
    kernel_rows = [row for row in rows if row["op"] != "adamw_step"]
    assert max(row["max_rel_err"] for row in kernel_rows if row["max_rel_err"] is not None) < 1e-2
    # optimizers: same params and grads, same number of steps; relerr is against torch's fused AdamW
    opt = {row["impl"]: row for row in rows if row["op"] == "adamw_step"}
    assert {"torch-foreach", "torch-fused", "stride-fused", "stride-8bit", "stride-8bit-torch",
            "stride-adafactor"} <= set(opt)
    assert opt["stride-fused"]["max_rel_err"] < 1e-5
    assert 0 < opt["stride-8bit"]["max_rel_err"] < 1e-2  # quantised moments, a few steps
    note = opt["stride-8bit-torch"]["note"]  # the Triton kernel ran (interpreter) and agrees with the torch path
    assert float(note.split("8-bit codes differing ")[1]) < 1e-2, note
