"""Fault injection in real processes: kill -9 at a random step and mid-save, SIGTERM, a full disk.

Each fault is followed by `stride train CONFIG --out DIR` on the same DIR (auto-resume); in
deterministic mode on CPU the resumed run's final params_sha256 must equal the uninterrupted run's.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from ckpt_helpers import REPO, cli, fit, popen_cli, reference_sha, summary_sha, write_config

from stride.checkpoint import CheckpointError, verify


@pytest.fixture(scope="module")
def ref() -> str:
    return reference_sha()


def _wait_for_steps(out: Path, proc: subprocess.Popen, n: int, timeout: float = 90) -> int:
    """Block until metrics.jsonl shows step >= n (or the process ends); returns the last step seen."""
    deadline, last = time.monotonic() + timeout, 0
    metrics = out / "metrics.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists():
            lines = metrics.read_text().splitlines()
            last = len(lines)
            if last >= n:
                return last
        time.sleep(0.005)
    return last


@pytest.mark.slow
def test_kill9_at_a_random_step_then_auto_resume(tmp_path: Path, ref: str) -> None:
    cfg, out = write_config(tmp_path / "run.toml"), tmp_path / "run"
    kill_after = random.Random().randint(4, 20)
    proc = popen_cli(cfg, out)
    _wait_for_steps(out, proc, kill_after)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, f"the run ended before the kill: {proc.stderr.read()[-2000:]}"
    assert not (out / "summary.json").exists()
    res = cli(cfg, out)
    assert res.returncode == 0, res.stderr[-3000:]
    assert summary_sha(out) == ref, f"killed after ~{kill_after} steps; {res.stderr[-1500:]}"


DRIVER = textwrap.dedent("""
    import os, signal, sys
    import stride.checkpoint.store as store
    from stride.cli.main import main

    real = store.write_manifest
    def killing_write_manifest(folder, step, *args, **kwargs):
        if step == int(os.environ["KILL_IN_SAVE_AT"]):
            os.kill(os.getpid(), signal.SIGKILL)  # shards and .metadata are written; manifest and rename are not
        return real(folder, step, *args, **kwargs)
    store.write_manifest = killing_write_manifest
    raise SystemExit(main(sys.argv[1:]))
""")


@pytest.mark.slow
def test_kill9_during_a_save_then_auto_resume(tmp_path: Path, ref: str) -> None:
    cfg, out = write_config(tmp_path / "run.toml"), tmp_path / "run"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env_run = subprocess.run(
        [sys.executable, str(driver), "train", str(cfg), "--out", str(out), "--no-progress"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**__import__("os").environ, "KILL_IN_SAVE_AT": "9", "PYTHONWARNINGS": "ignore"},
    )
    assert env_run.returncode == -signal.SIGKILL, env_run.stderr[-2000:]
    ck = out / "checkpoints"
    assert (ck / ".tmp-step_00000009").is_dir() and not (ck / "step_00000009").exists()
    res = cli(cfg, out)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "removed .tmp-step_00000009 (a save that never committed)" in res.stderr
    assert "resuming from step_00000006" in res.stderr
    assert summary_sha(out) == ref


@pytest.mark.slow
def test_sigterm_saves_exits_cleanly_and_resumes(tmp_path: Path, ref: str) -> None:
    cfg, out = write_config(tmp_path / "run.toml", "checkpoint.every=0"), tmp_path / "run"
    proc = popen_cli(cfg, out)
    seen = _wait_for_steps(out, proc, random.Random().randint(3, 15))
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert "SIGTERM at step" in err
    step = int(err.split("SIGTERM at step ")[1].split(":")[0])
    assert seen <= step < 24
    assert verify(out / "checkpoints" / f"step_{step:08d}").ok
    res = cli(cfg, out)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"continuing at step {step}" in res.stderr
    assert summary_sha(out) == ref


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    # One checkpoint of the test model is about 1.4 MB: 2 MB holds one, not two.
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs here (needs root/CAP_SYS_ADMIN): {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_fails_the_save_keeps_the_previous_and_resumes(tmp_path: Path, small_tmpfs: Path,
                                                                   ref: str) -> None:
    out, ck = tmp_path / "run", small_tmpfs / "ckpt"
    ov = (f'checkpoint.dir="{ck}"', "checkpoint.keep_last=1")
    with pytest.raises(CheckpointError) as err:
        fit(out, *ov)
    msg = str(err.value)
    assert "checkpoint save at step 6" in msg and "the disk is full" in msg
    assert "the previous checkpoint step_00000003 is intact" in msg
    assert [p.name for p in ck.iterdir()] == ["step_00000003"] and verify(ck / "step_00000003").ok
    subprocess.run(["mount", "-o", "remount,size=8m", str(small_tmpfs)], check=True)  # space freed
    s = fit(out, *ov)
    assert s["checkpoint"]["resumed_from"] == "step_00000003" and s["params_sha256"] == ref


TORCHRUN_DRIVER = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from stride.checkpoint.callback import CheckpointCallback
    from stride.cli.main import main

    marker = Path(os.environ["KILL_MARKER"])
    real = CheckpointCallback.on_step_end
    def on_step_end(self, trainer):
        real(self, trainer)
        # rank 1 of the first attempt dies after step 7; torchrun restarts both ranks
        if trainer.step == 7 and os.environ.get("RANK") == "1" and not marker.exists():
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
    CheckpointCallback.on_step_end = on_step_end
    raise SystemExit(main(sys.argv[1:]))
""")


@pytest.mark.slow
@pytest.mark.dist
def test_torchrun_max_restarts_brings_a_killed_ddp_rank_back(tmp_path: Path) -> None:
    import json
    import os

    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip(f"torchrun not found next to {sys.executable}")
    cfg = write_config(tmp_path / "run.toml", "parallel.dp_replicate=2", "train.steps=12")
    driver = tmp_path / "driver.py"
    driver.write_text(TORCHRUN_DRIVER)
    env = {**os.environ, "KILL_MARKER": str(tmp_path / "killed"), "PYTHONWARNINGS": "ignore",
           "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "OMP_NUM_THREADS": "1"}

    def torchrun_train(out: Path, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(torchrun), "--standalone", "--nproc_per_node=2", *extra, str(driver),
                               "train", str(cfg), "--out", str(out), "--no-progress"],
                              capture_output=True, text=True, timeout=240, cwd=REPO, env=env)

    (tmp_path / "killed").write_text("reference run: no kill")
    ref = torchrun_train(tmp_path / "ref")
    assert ref.returncode == 0, ref.stderr[-3000:]
    (tmp_path / "killed").unlink()
    res = torchrun_train(tmp_path / "run", "--max-restarts=1")
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "killed").exists()  # rank 1 really died at step 7
    assert res.stderr.count("resuming from step_00000006") == 2  # both ranks of the restarted job
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["params_sha256"] == summary_sha(tmp_path / "ref")
