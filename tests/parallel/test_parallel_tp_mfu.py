"""FLOPs per step and MFU are per rank under tensor parallelism too, as under DDP, FSDP and pp.

The trainer counts FLOPs on the model before TP splits it, and the ranks of a TP group read the same
batch: that count is the group's work. Each rank reports 1/tp of it, so with the global batch split
over every rank a run's `flops_per_step` is one process's over the world size (it once reported the
group's, and so an MFU `tp` times too high). A run under torchrun (gloo, one thread per rank; the
4-rank launch this package's modules share, conftest.py) against this process alone on the same config.
"""

from __future__ import annotations

import json

import pytest
import torch
from summary_worker import TP_MFU as TINY

from stride.config import load_config
from stride.train.trainer import Trainer

# trained under torchrun by summary_worker.py, in the 4-rank launch this package's modules share (conftest.py): a
# `stride train --nproc 4` of its own cost this test a launch of 4 processes more
TORCHRUN_PART, TORCHRUN_RUNS = "tp_mfu", {4: ["tp_mfu_fsdp_tp"]}


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
@pytest.mark.parametrize(("nproc", "run"), [(4, "tp_mfu_fsdp_tp")])
def test_tp_reports_flops_and_mfu_per_rank(torchrun_runs, one_process_flops: int, nproc: int, run: str) -> None:
    s = json.loads((torchrun_runs.folder(TORCHRUN_PART) / f"{run}.json").read_text())
    assert s["world_size"] == nproc and "tp" in s["parallel"]
    # the same global batch over nproc ranks: each does 1/nproc of one process's FLOPs
    assert s["flops_per_step"] == one_process_flops // nproc
    assert s["achieved_flops_per_s"] == pytest.approx(s["flops_per_step"] / s["step_time_s"])
    assert s["mfu"] == pytest.approx(s["achieved_flops_per_s"] / s["peak_flops_per_s"])
