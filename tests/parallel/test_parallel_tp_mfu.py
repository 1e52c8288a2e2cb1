"""FLOPs per step and MFU are per rank under tensor parallelism too, as under DDP, FSDP and pp.

The trainer counts FLOPs on the model before TP splits it, and the ranks of a TP group read the same
batch: that count is the group's work. Each rank reports 1/tp of it, so with the global batch split
over every rank a run's `flops_per_step` is one process's over the world size (it once reported the
group's, and so an MFU `tp` times too high). `stride train --nproc N` (torchrun, gloo, one thread per
rank) against this process alone on the same config.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stride.config import load_config
from stride.train.trainer import Trainer

TINY = ["model.d_model=32", "model.n_layers=2", "model.n_heads=4", "data.n_assets=4", "data.n_steps=600",
        "data.seq_len=16", "train.batch_size=8", "train.steps=2", "train.val_every=0", "train.threads=1",
        "metrics.flops=true", "metrics.skip_steps=0"]


@pytest.fixture(scope="module")
def one_process_flops() -> int:
    threads = torch.get_num_threads()
    try:
        trainer = Trainer(config=load_config(overrides=[*TINY, "metrics.progress=false"]), write_run_dir=False)
        trainer.setup()
    finally:
        torch.set_num_threads(threads)
    assert trainer.par.world_size == 1 and trainer.flops_per_step
    return trainer.flops_per_step


@pytest.mark.dist
@pytest.mark.slow
# One layout, TP inside data parallelism: its expected count (one process's over 4) divides by the TP degree and by
# the data-parallel one, so it fails for the group's count (over 2) as well as for a data-parallel slip. A second
# case at tp = 2 alone (over 2, the group's over 1) went through the same `rank_flops` and cost one launch more.
@pytest.mark.parametrize(("nproc", "layout"), [(4, ["parallel.dp_shard=2", "parallel.tp=2"])])
def test_tp_reports_flops_and_mfu_per_rank(tmp_path: Path, one_process_flops: int, nproc: int,
                                           layout: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "LOCAL_RANK", "RANK")}
    out = tmp_path / "run"
    sets = [a for o in [*TINY, *layout] for a in ("--set", o)]
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    proc = subprocess.run([sys.executable, "-m", "stride", "train", str(cfg), "--nproc", str(nproc), "--out", str(out),
                           "--no-progress", *sets], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["world_size"] == nproc and "tp" in s["parallel"]
    # the same global batch over nproc ranks: each does 1/nproc of one process's FLOPs
    assert s["flops_per_step"] == one_process_flops // nproc
    assert s["achieved_flops_per_s"] == pytest.approx(s["flops_per_step"] / s["step_time_s"])
    assert s["mfu"] == pytest.approx(s["achieved_flops_per_s"] / s["peak_flops_per_s"])
