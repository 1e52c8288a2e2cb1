"""Faults that involve several ranks: a rank that stops taking part, and a save that fails on one rank only.

Both run 2 gloo processes. A hung rank must end the others within the collective timeout with a
message naming rank, operation and step (never a silent hang: every subprocess has a hard timeout);
a save that fails on rank 1 must raise on both ranks, naming rank 1 and the cause, commit nothing and
leave the previous checkpoint valid.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ckpt_helpers import REPO, stderr_of_all, write_config

from stride.checkpoint import verify

HERE = Path(__file__).parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(script: Path, args: list[str], world: int = 2, **extra_env: str) -> list[subprocess.Popen]:
    port = str(_port())
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1",
               "PYTHONWARNINGS": "ignore", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", **extra_env}
        procs.append(subprocess.Popen([sys.executable, str(script), *args], env=env, cwd=REPO,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def _finish(procs: list[subprocess.Popen], timeout: float = 150) -> list[str]:
    """Wait for every rank (hard limit), then return their stderr; all must exit 0."""
    errs = stderr_of_all(procs, timeout)
    for rank, (p, err) in enumerate(zip(procs, errs, strict=True)):
        assert p.returncode == 0, f"rank {rank} exited with {p.returncode}:\n{err[-3000:]}"
    return errs


TIMEOUT_S = 6.0


@pytest.mark.slow
@pytest.mark.dist
@pytest.mark.parametrize(("before_checkpoint", "operation", "step"), [
    (False, "forward/backward (DDP gradient all-reduce)", 6),  # rank 0 is already in step 6
    (True, "checkpoint barrier (before the save)", 5),  # rank 1 never reaches the save at step 5
])
def test_a_hung_rank_ends_the_job_naming_rank_operation_and_step(tmp_path: Path, before_checkpoint: bool,
                                                                  operation: str, step: int) -> None:
    cfg = write_config(tmp_path / "run.toml", "parallel.dp_replicate=2", f"parallel.collective_timeout_s={TIMEOUT_S}",
                       "train.steps=40", "checkpoint.every=5")
    marker = tmp_path / "asleep"
    procs = _launch(HERE / "ckpt_hang_driver.py", ["train", str(cfg), "--out", str(tmp_path / "run"), "--no-progress"],
                    SLEEP_AT="5", MARKER=str(marker), SLEEP_BEFORE_CHECKPOINT="1" if before_checkpoint else "0")
    try:
        _, err = procs[0].communicate(timeout=150)  # hard limit: a silent hang fails here, not forever
        ended = time.time()
    finally:
        for p in procs:
            p.kill()
            p.communicate()
    assert marker.exists(), f"rank 1 never reached step 5: {err[-2000:]}"
    asleep = float(marker.read_text())
    assert procs[0].returncode == 124, err[-2000:]
    line = next((ln for ln in err.splitlines() if ln.startswith("stride watchdog:")), None)
    assert line is not None, err[-2000:]
    assert 'rank 0 waited ' in line and f'in "{operation}" at step {step}' in line, line
    waited = float(re.search(r"waited ([0-9.]+) s", line).group(1))
    assert TIMEOUT_S <= waited <= TIMEOUT_S + 3, line
    # rank 0 may have entered the collective just before rank 1 wrote the marker; then it ended within the limit
    # plus one poll period and a slack for a loaded machine
    assert TIMEOUT_S - 1.5 <= ended - asleep <= TIMEOUT_S + 15, (ended - asleep, line)


@pytest.mark.slow
@pytest.mark.dist
def test_a_save_failing_on_one_rank_fails_on_every_rank_and_commits_nothing(tmp_path: Path) -> None:
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    out.mkdir()
    procs = _launch(HERE / "ckpt_fail_worker.py", [str(ckpt), str(out)])
    for p in procs:
        _, err = p.communicate(timeout=150)
        assert p.returncode == 0, err[-3000:]
    seen = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert seen[0]["errors"] == seen[1]["errors"]  # both ranks raised the same error for the same saves
    errors = seen[0]["errors"]
    assert errors["1"] is None and errors["4"] is None
    assert errors["2"] == (f"checkpoint save at step 2 into {ckpt} failed on rank 1: the disk is full; "
                           "the previous checkpoint step_00000001 is intact")
    assert errors["3"].startswith(f"checkpoint save at step 3 into {ckpt} failed on rank 1: OSError: [Errno 5] "
                                  "Input/output error")
    assert errors["3"].endswith("the previous checkpoint step_00000001 is intact")
    assert seen[0]["saved"] == seen[1]["saved"] == [1, 4]
    assert sorted(p.name for p in ckpt.iterdir()) == ["step_00000001", "step_00000004"]  # no .tmp-* left
    for step in (1, 4):
        verdict = verify(ckpt / f"step_{step:08d}")
        assert verdict.ok, verdict.reason
        assert {f for f in verdict.manifest["files"] if f.endswith(".distcp")} >= {"__0_0.distcp", "__1_0.distcp"}
