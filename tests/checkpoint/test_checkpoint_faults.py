"""Fault injection in real processes: kill -9 at a random step and mid-save, SIGTERM, a full disk.

Each fault is followed by `stride train CONFIG --out DIR` on the same DIR (auto-resume); in
deterministic mode on CPU the resumed run's final params_sha256 must equal the uninterrupted run's.
"""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from ckpt_helpers import REPO, cli, fit, mounted_tmpfs, popen_cli, reference_sha, summary_sha, write_config

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
    (tmp,) = [p.name for p in ck.iterdir() if p.name.startswith(".tmp-stride-")]  # tagged with the killed pid
    assert tmp.endswith("-step_00000009") and (ck / tmp).is_dir() and not (ck / "step_00000009").exists()
    res = cli(cfg, out)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"removed {tmp} (a save that never committed)" in res.stderr
    assert "resuming from step_00000006" in res.stderr
    assert summary_sha(out) == ref


@pytest.mark.slow
def test_sigterm_saves_exits_cleanly_and_resumes(tmp_path: Path) -> None:
    # 120 steps, not the helpers' 24: with no periodic checkpoint, metrics.jsonl reaches the disk only every
    # RunDir's FLUSH_S (0.1 s), about 20 of these steps, so a 24-step run was often at its end by the time a
    # step showed and the signal came after it (a clean-clone CI run failed so: no "SIGTERM at step")
    steps = 120
    cfg, out = write_config(tmp_path / "run.toml", "checkpoint.every=0", f"train.steps={steps}"), tmp_path / "run"
    proc = popen_cli(cfg, out)
    seen = _wait_for_steps(out, proc, random.Random().randint(3, 15))
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert "SIGTERM at step" in err
    step = int(err.split("SIGTERM at step ")[1].split(":")[0])
    assert seen <= step < steps
    assert verify(out / "checkpoints" / f"step_{step:08d}").ok
    res = cli(cfg, out)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"continuing at step {step}" in res.stderr
    assert summary_sha(out) == reference_sha(f"train.steps={steps}")


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    # One checkpoint of the test model is about 1.4 MB: 2 MB holds one, not two.
    yield from mounted_tmpfs(tmp_path / "small-disk", "2m")


def test_full_disk_fails_the_save_keeps_the_previous_and_resumes(tmp_path: Path, small_tmpfs: Path,
                                                                   ref: str) -> None:
    out, ck = tmp_path / "run", small_tmpfs / "ckpt"
    ov = (f'checkpoint.dir="{ck}"', "checkpoint.keep_last=1")
    with pytest.raises(CheckpointError) as err:
        fit(out, *ov)
    msg = str(err.value)
    assert "checkpoint save at step 6" in msg and "the disk is full" in msg
    assert "the previous checkpoint step_00000003 is intact" in msg
    names = [p.name for p in ck.iterdir() if p.name != ".stride-lock"]  # (an absolute checkpoint.dir is locked too)
    assert names == ["step_00000003"] and verify(ck / "step_00000003").ok
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
    assert res.stderr.count("resuming from step_00000006") == 1  # rank 0 says it for the restarted job
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["params_sha256"] == summary_sha(tmp_path / "ref")


def _nproc_train(cfg: Path, out: Path) -> subprocess.Popen:
    """`stride train CONFIG --nproc 2` (parent -> torchrun agent -> 2 workers) in a process group of its own."""
    import os

    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen([sys.executable, "-m", "stride", "train", str(cfg), "--out", str(out), "--no-progress",
                             "--nproc", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env=env, start_new_session=True)


def _communicate(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    import os

    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"stride train --nproc 2 did not end within {timeout} s:\n{err[-3000:]}")
    return proc.returncode, err


@pytest.fixture(scope="module")
def nproc_ref(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The signal tests' config and its uninterrupted 2-rank params_sha256."""
    tmp = tmp_path_factory.mktemp("nproc")
    cfg = write_config(tmp / "run.toml", "parallel.dp_replicate=2", f"train.steps={NPROC_STEPS}",
                       "checkpoint.every=0", "parallel.collective_timeout_s=60")
    code, err = _communicate(_nproc_train(cfg, tmp / "ref"))
    assert code == 0, err[-3000:]
    return cfg, summary_sha(tmp / "ref")


# room for each signal: the first after step 30, the second 30 steps into the resumed run, each with 130 steps
# to spare (a step here is 5-30 ms); every extra step is paid 3x
NPROC_STEPS = 200


def _signal_nproc_run(cfg: Path, out: Path, target: str, after: int) -> tuple[int, str]:
    """`stride train --nproc 2` on `out`, signalled as `target` once metrics.jsonl holds step `after`; checks
    that both ranks committed the same step and nothing else was added. Returns (that step, stderr)."""
    import os

    before = sorted(p.name for p in (out / "checkpoints").iterdir()) if (out / "checkpoints").is_dir() else []
    proc = _nproc_train(cfg, out)
    seen = _wait_for_steps(out, proc, after, timeout=120)
    assert proc.poll() is None and seen >= after, f"the run ended or stalled before the signal (step {seen})"
    workers = [c.pid for c in psutil.Process(proc.pid).children(recursive=True) if "torch.distributed.run" not in
               " ".join(c.cmdline())]
    assert len(workers) == 2, workers
    if target == "parent":
        os.kill(proc.pid, signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGTERM)  # the parent, the agent and both workers
        # The agent's forwarded copy often merges with the scheduler's (a pending signal is not queued
        # twice); more copies over the next 100 ms make sure some land after the first was handled, as
        # they do when the agent is slower.
        for _ in range(10):
            time.sleep(0.01)
            for pid in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
    _, err = _communicate(proc)
    committed = [line for line in err.splitlines() if "committed" in line and "exiting" in line]
    assert len(committed) == 1, err[-3000:]  # rank 0 says it once for the run; one new step folder below
    if target == "job":
        assert any("more stop signal(s)" in line for line in committed), committed
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    new = [n for n in names if n not in before]
    assert len(new) == 1 and new[0].startswith("step_") and names == sorted([*before, *new]), (before, names)
    stopped = int(new[0].removeprefix("step_"))
    assert after <= stopped < NPROC_STEPS and verify(out / "checkpoints" / new[0]).ok
    return stopped, err


@pytest.mark.slow
@pytest.mark.dist
def test_sigterm_to_a_torchrun_job_or_its_parent_checkpoints_on_every_rank(tmp_path: Path,
                                                                          nproc_ref: tuple[Path, str]) -> None:
    """Two stops of one run, then its resume. 1. "job": what a scheduler does at preemption (Slurm signals every
    process of the job): SIGTERM reaches the `stride train` parent, torchrun's agent and both workers, and each
    worker gets it again through the agent. Before the repeat window such a copy ended a worker at once, without
    its checkpoint (this test then fails). 2. The same command resumes from that step; "parent": `kill PID` of
    `stride train --nproc 2` alone; it passes the signal to the agent, which forwards it to the workers, and
    waits for them. 3. The same command resumes again and finishes: the parameters equal the uninterrupted run's.
    (One chain of 3 launches where two separate runs took 4: each stop and each resume is still checked.)"""
    cfg, ref = nproc_ref
    out = tmp_path / "run"
    first, _ = _signal_nproc_run(cfg, out, "job", after=30)
    second, err = _signal_nproc_run(cfg, out, "parent", after=first + 30)
    assert f"step_{first:08d}" in err, err[-3000:]  # the second launch resumed from the first stop
    code, err = _communicate(_nproc_train(cfg, out))  # the same command resumes and finishes
    assert code == 0, err[-3000:]
    assert f"step_{second:08d}" in err, err[-3000:]
    assert summary_sha(out) == ref
