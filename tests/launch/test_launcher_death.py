"""`stride train --nproc N`: torchrun and every rank end with the launcher, however it ends (stride.launch.lifeline).

torchrun starts each worker in a session of its own, so `kill -9` of the launcher (the pid the user has) or of its
process group used to leave torchrun and both workers training and writing into the run folder, whose lock died
with the launcher: the same command again then resumed beside them (two writers in one folder).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from launch_guard import children_killed_after
from nproc_run import kill, marked, steps_logged, tiny_config, wait_gone

from stride.cli.main import main
from stride.files import run_lock
from stride.launch import lifeline

REPO = Path(__file__).resolve().parents[2]
MARK = "STRIDE_TEST_LIFELINE_MARK"  # every process of one test's job inherits it: how the test finds them all
linux_only = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds processes through /proc")


def _marked(mark: str) -> list[int]:
    return marked(MARK, mark)


def _wait_gone(mark: str, timeout: float) -> tuple[list[int], float]:
    return wait_gone(MARK, mark, timeout)


def _env(mark: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", lifeline.ENV_LAUNCHER,
                        "STRIDE_RUN_LOCK")}
    return {**env, MARK: mark, "PYTHONPATH": str(REPO), **extra}


# -- the mechanism alone, without torch: launcher -> "torchrun" -> "rank" --

RANK = textwrap.dedent("""
    import sys, time
    from stride.launch import lifeline
    if sys.argv[1] == "no-prctl":
        lifeline._prctl = lambda: None  # as on a system without prctl: the polling thread alone
    assert lifeline.watch_launcher()
    print("watching", flush=True)
    time.sleep(600)
""")
AGENT = textwrap.dedent("""
    import subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.DEVNULL,
                     start_new_session=True)
    time.sleep(600)
""")
LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys, time
    from stride.launch import lifeline
    env = {**os.environ, **lifeline.env_for_ranks(), "LOCAL_RANK": "0"}
    setup = lifeline.child_setup() if sys.argv[3] == "prctl" else None  # as run_torchrun starts torchrun
    agent = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]], env=env,
                             preexec_fn=setup, start_new_session=True)
    print(agent.pid, flush=True)
    time.sleep(600)
""")


def _chain(mark: str, how: str) -> tuple[subprocess.Popen, list[int]]:
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, AGENT, RANK, how], env=_env(mark),
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 30
    while len(pids := _marked(mark)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(pids) == 3, pids
    time.sleep(1.0)  # the rank is past watch_launcher (it imports stride.launch.lifeline first)
    assert len(_marked(mark)) == 3
    return launcher, pids


@linux_only
@pytest.mark.skipif(lifeline._prctl() is None, reason="no prctl here")
def test_parent_death_signal_ends_the_agent_and_its_rank_at_once() -> None:
    mark = uuid.uuid4().hex
    launcher, pids = _chain(mark, "prctl")
    try:
        launcher.kill()
        launcher.wait()
        left, took = _wait_gone(mark, 5)
        assert not left, f"still running {took:.1f} s after the launcher's SIGKILL: {left}"
        assert took < 1.0, took
    finally:
        kill(pids)


@linux_only
def test_without_prctl_a_rank_sees_its_launcher_gone_within_a_second() -> None:
    """The polling backstop: the 'torchrun' here outlives the launcher (no parent-death signal), the rank
    sees the launcher gone (a zombie first, as here before the wait below) and exits."""
    mark = uuid.uuid4().hex
    launcher, pids = _chain(mark, "no-prctl")
    agent = int(launcher.stdout.readline())
    try:
        launcher.kill()
        time.sleep(lifeline.POLL_S * 3)  # the launcher is a zombie now: not reaped yet
        assert _marked(mark) == [agent]  # the rank is gone; only the agent, which nothing asked to die, is left
        launcher.wait()
    finally:
        kill(pids)


def test_only_a_rank_of_run_torchrun_watches() -> None:
    assert lifeline.watch_launcher({}) is False
    assert lifeline.watch_launcher({lifeline.ENV_LAUNCHER: "1"}) is False  # not under torchrun: a launcher itself
    assert lifeline.watch_launcher({"LOCAL_RANK": "0"}) is False  # `torchrun -m stride train` by hand


# -- a resume while a rank of the killed launch still runs --

@linux_only
@pytest.mark.parametrize("nproc", [["--nproc", "2"], []])
def test_a_resume_is_refused_while_a_rank_of_an_earlier_launch_works_in_the_folder(tmp_path: Path,
                                                                                   nproc: list[str]) -> None:
    """The launcher's death ends its ranks within a second; until the last is gone the folder is theirs, for a
    resume with `--nproc` as for one without (the lock file was the killed launcher's and is free at once)."""
    mark = uuid.uuid4().hex
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text("")
    before = sorted(p.name for p in out.iterdir())
    # a rank of a launch whose launcher (this test process, as far as the rank knows) is still alive
    rank = subprocess.Popen([sys.executable, "-c", RANK, "prctl"], stdout=subprocess.PIPE, text=True,
                            env=_env(mark, LOCAL_RANK="1", **{lifeline.ENV_LAUNCHER: str(os.getpid()),
                                                              "STRIDE_RUN_LOCK": f"{out.resolve()}|box|1"}))
    try:
        assert rank.stdout.readline().strip() == "watching"
        assert run_lock.ranks_still_in(out)
        cfg = tmp_path / "c.toml"
        cfg.write_text('[train]\nsteps = 3\nval_every = 0\n[model]\nd_model = 32\nn_layers = 2\n')
        res = subprocess.run([sys.executable, "-m", "stride", "train", str(cfg), *nproc, "--out", str(out),
                              "--no-progress"], env=_env(mark), capture_output=True, text=True, timeout=120)
        assert res.returncode == 1, res.stderr[-3000:]
        assert "in use by processes of an earlier `stride train --nproc`" in res.stderr, res.stderr[-3000:]
        assert "torch.distributed" not in res.stderr  # nothing was started
        assert sorted(p.name for p in out.iterdir()) == before  # left as it was: no lock file either
    finally:
        rank.kill()
        rank.wait()
    assert not run_lock.ranks_still_in(out)  # the kernel dropped the rank's lock with it


# -- the real thing --

def _config(path: Path, steps: int) -> Path:
    return tiny_config(path, steps, "orphans", 50)



@linux_only
@pytest.mark.dist
@pytest.mark.slow
@pytest.mark.parametrize("target", ["launcher", "group"])
def test_sigkill_of_the_launcher_ends_torchrun_and_both_ranks(tmp_path: Path, target: str,
                                                              capfd: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL of the launcher's pid, or of its process group, ends torchrun and both ranks at once, and leaves the
    folder free. After the kill of the pid, the documented resume (the same line again) continues the run and
    finishes it: nothing of the killed launch is in the way. (The resume was a test of its own, whose first launch
    was this case's: one launch fewer.)"""
    mark = uuid.uuid4().hex
    resume = target == "launcher"
    # only a kill ends the run: it is killed after 60 steps (a step here is 15-40 ms); the one resumed here has
    # room for the kill (140 steps) and few to train after it
    steps = 200 if resume else 100_000
    cfg, out = _config(tmp_path / "c.toml", steps), tmp_path / "run"
    cmd = [sys.executable, "-m", "stride", "train", str(cfg), "--nproc", "2", "--out", str(out), "--no-progress"]
    log = (tmp_path / "launch.log").open("w")
    launcher = subprocess.Popen(cmd, env=_env(mark), stdout=log, stderr=log, start_new_session=True)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 180
        while steps_logged(out) < 60 and time.monotonic() < deadline and launcher.poll() is None:
            time.sleep(0.05)
        assert steps_logged(out) >= 60, (tmp_path / "launch.log").read_text()[-3000:]
        pids = _marked(mark)
        assert len(pids) == 4, pids  # launcher, torchrun, 2 ranks
        if target == "launcher":
            os.kill(launcher.pid, signal.SIGKILL)
        else:
            os.killpg(launcher.pid, signal.SIGKILL)  # the launcher's group: itself and torchrun, not the ranks
        left, took = _wait_gone(mark, 5)
        assert not left, f"still running {took:.1f} s after SIGKILL of the {target}: {left}"
        launcher.wait(10)
        logged = steps_logged(out)
        time.sleep(1)
        assert steps_logged(out) == logged  # nobody writes any more
        assert not (out / "summary.json").exists()  # not marked finished
        assert logged < steps
        assert not run_lock.ranks_still_in(out)
        assert any((out / "checkpoints").glob("step_*"))  # what the same command resumes from
        if resume:  # the same command, with this process as its launcher (tests/launch_guard.py: a process fewer)
            for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", lifeline.ENV_LAUNCHER,
                        "STRIDE_RUN_LOCK"):
                monkeypatch.delenv(var, raising=False)
            monkeypatch.setenv("PYTHONPATH", str(REPO))
            with children_killed_after(300):
                rc = main(cmd[3:])
            err = capfd.readouterr().err
            assert rc == 0, err[-3000:]
            assert "continuing at step" in err, err[-3000:]
            assert json.loads((out / "summary.json").read_text())["steps"] == steps
    finally:
        kill(pids)
        kill(_marked(mark))
        launcher.wait(10) if launcher.poll() is None else None
