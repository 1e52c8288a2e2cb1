"""A world sweep's torchrun and ranks end with `stride bench` however it ends. SIGTERM to the bench ended it by the
default action, without a word, and left torchrun and the rank training on into the point's folder (an orphan a rerun
with the same --out then raced: it removes a point's unfinished run folder); SIGKILL did the same. Now SIGTERM stops
the sweep as Ctrl-C does (one line, exit 130, how to resume) and the lifeline of `stride train --nproc` ends torchrun
and its ranks whatever ends the bench."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "launch"))
from nproc_run import marked  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MARK = "STRIDE_TEST_WORLD_STOP_MARK"


def _marked(mark: str) -> list[int]:
    return marked(MARK, mark)


@pytest.mark.slow
@pytest.mark.dist
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds processes through /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_ranks_end_with_the_bench(sig: signal.Signals, tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "STRIDE_LAUNCHER_PID")}
    out = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "stride", "bench", "--sweep", "world", "--workloads", "mlp_tiny",
                             "--world-sizes", "1", "--out", str(out), "--no-report", "--set", "train.steps=100000",
                             "--set", "train.val_every=0", "--set", "metrics.flops=false"],
                            env={**env, MARK: mark, "PYTHONPATH": str(REPO)}, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    metrics = out / "mlp_tiny+n1" / "rep0" / "run" / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 120
        while not metrics.is_file() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert metrics.is_file(), "the baseline rank never logged a step"
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=30)
        deadline = time.monotonic() + 10  # the lifeline looks every 0.5 s; the parent-death signal is at once
        while _marked(mark) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _marked(mark) == [], "torchrun or its rank outlived stride bench"
        if sig == signal.SIGTERM:
            assert proc.returncode == 130, err[-2000:]
            assert "mlp_tiny: stopped by SIGTERM: 0 of 1 run(s) finished; the same command with --out" in err, err
        assert not (out / "mlp_tiny+n1" / "rep0" / "run" / "summary.json").exists()
    finally:
        for pid in _marked(mark):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
