"""GPipe and 1F1B over 2 stages give one process's loss and gradients (microbatch mean = batch mean)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from pipeline_worker import make, mse

from stride.parallel.pipeline import split_points

WORKER = Path(__file__).with_name("pipeline_worker.py")


def test_split_points_spread_layers():
    assert list(split_points(4, 2)) == ["blocks.2"]
    assert list(split_points(5, 3)) == ["blocks.1", "blocks.3"]
    with pytest.raises(Exception, match="only 2 layers"):
        split_points(2, 3)


@pytest.mark.dist
@pytest.mark.slow
def test_pipeline_schedules_match_one_process(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(WORKER),
           str(tmp_path), "gpipe,1f1b"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    model, x, y = make()
    ref = mse(model(x), y)
    ref.backward()
    ref_loss = ref.item()
    for name in ("gpipe", "1f1b"):
        got = json.loads((tmp_path / f"{name}.json").read_text())
        assert got["loss"] == pytest.approx(ref_loss, abs=1e-6)
        assert set(got["grads"]) == {n for n, _ in model.named_parameters()}
        diff = max(float((torch.tensor(got["grads"][n]) - p.grad).abs().max()) for n, p in model.named_parameters())
        print(f"{name}: loss diff {abs(got['loss'] - ref_loss):.3g}, largest grad diff {diff:.3g}")
        assert diff < 1e-6
