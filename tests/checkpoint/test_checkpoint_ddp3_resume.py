"""`stride train --nproc 3` (DDP, gloo, deterministic) resumed from a checkpoint ends on the uninterrupted run's bits.

Before, the first step after the resume all-reduced its gradients with DDP's first-iteration bucket layout, which
gloo's ring sums in another order at 3 ranks: the 9-step run resumed at step 6 ended with another `params_sha256`
(f61512b0... against bdc5ec3e... here, 2-core AMD EPYC family 26). tests/parallel/test_ddp_rank_order.py has the
cause in one launch; this is the user's path: a checkpoint, a rerun of the same command, DCP's load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ckpt_helpers import REPO, summary_sha, write_config


def _train(config: Path, out: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "stride", "train", str(config), "--out", str(out), "--nproc", "3",
                        "--no-progress"], capture_output=True, text=True, timeout=240, cwd=REPO, env=env)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.dist
def test_three_ddp_ranks_resumed_end_on_the_uninterrupted_runs_params(tmp_path: Path) -> None:
    ddp3 = ["parallel.dp_replicate=3", "train.batch_size=48", 'optim.schedule="constant"']
    six, nine = (write_config(tmp_path / f"{n}.toml", *ddp3, f"train.steps={n}") for n in (6, 9))
    _train(nine, tmp_path / "whole")
    _train(six, tmp_path / "resumed")
    _train(nine, tmp_path / "resumed")  # continues from the checkpoint at step 6 (docs/checkpoint.md, extending)
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert summary["start_step"] == 6 and summary["steps"] == 9
    assert summary_sha(tmp_path / "resumed") == summary_sha(tmp_path / "whole")
    losses = [[json.loads(line)["loss"] for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()
               if '"loss"' in line] for run in ("whole", "resumed")]
    assert losses[0] == losses[1] and len(losses[0]) == 9
