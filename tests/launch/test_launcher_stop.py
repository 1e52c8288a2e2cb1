"""`stride train --nproc N` stopped by a signal to its launcher: one final checkpoint, exit status 0.

SIGTERM, SIGUSR1 and SIGINT (Ctrl-C), sent to the launcher's pid alone or to its whole process group, stop the
run as they stop a single-process `stride train`: the ranks save one final checkpoint and every process exits
0, with no traceback; the same command resumes from that checkpoint. Before, SIGTERM reached torchrun's agent,
which ended its workers itself, printed its `SignalException` and exited 1, and SIGINT to the launcher alone was
swallowed while the run trained on to its end (stride.launch.torchrun._Stop has the rules).

The first tests drive `run_torchrun` with a stand-in for torchrun (no torch, about a second each); the last
ones run the real thing on 2 gloo ranks.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from launch_guard import children_killed_after
from nproc_run import kill, marked, newest_step, tiny_config, wait_gone

from stride.checkpoint import signals
from stride.cli.main import main
from stride.launch import lifeline, torchrun

REPO = Path(__file__).resolve().parents[2]
MARK = "STRIDE_TEST_STOP_MARK"  # every process of one test's job inherits it: how the test finds them all
linux_only = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds processes through /proc")
STOPS = ("SIGTERM", "SIGUSR1", "SIGINT")


def _marked(mark: str) -> list[int]:
    return marked(MARK, mark)


def _kill_all(mark: str) -> None:
    kill(_marked(mark))


def _env(mark: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", lifeline.ENV_LAUNCHER,
                        "STRIDE_RUN_LOCK")}
    return {**env, MARK: mark, "PYTHONPATH": str(REPO)}


def _send(pid: int, sig: int, target: str) -> None:
    (os.killpg if target == "group" else os.kill)(pid, sig)


# -- the launcher's rules, with a stand-in for torchrun --

# A "rank": after `delay` seconds it takes SIGTERM, SIGUSR1 and SIGINT as stride's handler does (all at once),
# notes each signal it gets in a file, and exits 0 on the first unless told to ignore them ("stay").
WORKER = textwrap.dedent("""
    import os, signal, sys, time
    folder, delay, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    got = []
    def handle(signum, frame):
        with open(os.path.join(folder, f"got-{os.getpid()}"), "a") as f:
            f.write(signal.Signals(signum).name + "\\n")
        got.append(signum)
    time.sleep(delay)
    for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
        signal.signal(s, handle)
    open(os.path.join(folder, f"ready-{os.getpid()}"), "w").close()
    while not got or mode == "stay":
        time.sleep(0.01)
    sys.exit(0)
""")
# The "agent": starts its workers each in a session of its own, as torchrun does, and exits 0 when all did.
# A signal that reaches it is noted (it must not: only the launcher hands them on).
AGENT = textwrap.dedent("""
    import os, signal, subprocess, sys
    n = int(sys.argv[1].split("=")[1])
    folder = sys.argv[3]
    def noted(signum, frame):
        open(os.path.join(folder, "agent-" + signal.Signals(signum).name), "w").close()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, noted)
    procs = [subprocess.Popen([sys.executable, "-c", sys.argv[2], *sys.argv[3:]], start_new_session=True)
             for _ in range(n)]
    sys.exit(max(p.wait() for p in procs))
""")
LAUNCHER = textwrap.dedent("""
    import os, sys
    from stride.launch.torchrun import run_torchrun
    agent, worker, folder, delay, mode = sys.argv[1:]
    cmd = [sys.executable, "-c", agent, "--nproc-per-node=2", worker, folder, delay, mode]
    sys.exit(run_torchrun(cmd, dict(os.environ)))
""")


def _launch(mark: str, folder: Path, *, delay: float = 0.0, mode: str = "exit",
            sigint_ignored: bool = False) -> subprocess.Popen[str]:
    setup = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    return subprocess.Popen([sys.executable, "-c", LAUNCHER, AGENT, WORKER, str(folder), str(delay), mode],
                            env=_env(mark), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=setup)  # noqa: PLW1509


def _wait_ready(folder: Path, n: int = 2, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(list(folder.glob("ready-*"))) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(list(folder.glob("ready-*"))) == n


def _got(folder: Path) -> list[list[str]]:
    return sorted(p.read_text().split() for p in folder.glob("got-*"))


def _launcher_ready(proc: subprocess.Popen[str], mark: str, timeout: float = 30) -> None:
    """The launcher has its handlers (it has started the agent) and the agent has both workers."""
    deadline = time.monotonic() + timeout
    while len(_marked(mark)) < 4 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert len(_marked(mark)) == 4, proc.stderr.read() if proc.poll() is not None else _marked(mark)


@linux_only
@pytest.mark.parametrize("target", ["launcher", "group"])
@pytest.mark.parametrize("name", STOPS)
def test_a_stop_signal_is_handed_once_to_every_rank_and_all_exit_0(tmp_path: Path, name: str, target: str) -> None:
    mark = uuid.uuid4().hex
    proc = _launch(mark, tmp_path)
    try:
        _launcher_ready(proc, mark)
        _wait_ready(tmp_path)
        _send(proc.pid, signal.Signals[name], target)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert _got(tmp_path) == [[name], [name]]  # each rank once, as it was sent
        assert not list(tmp_path.glob("agent-*"))  # the agent never saw it (a session of its own)
        assert err == ""
    finally:
        _kill_all(mark)


@linux_only
def test_copies_within_the_window_are_one_request(tmp_path: Path) -> None:
    """`timeout` signals its child and then its group: the launcher gets two copies in microseconds."""
    mark = uuid.uuid4().hex
    proc = _launch(mark, tmp_path, mode="stay")  # the ranks keep running: nothing ends before the last signal
    try:
        _launcher_ready(proc, mark)
        _wait_ready(tmp_path)
        os.kill(proc.pid, signal.SIGINT)
        os.killpg(proc.pid, signal.SIGINT)
        os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None
        assert _got(tmp_path) == [["SIGINT"], ["SIGINT"]]
    finally:
        _kill_all(mark)


@linux_only
def test_a_second_ctrl_c_ends_the_run_at_once(tmp_path: Path) -> None:
    """A rank stuck in its step (here: it ignores the request) does not hold the operator: Ctrl-C again, more
    than INTERRUPT_WINDOW_S after the first, ends torchrun and the ranks now, exit status 130."""
    mark = uuid.uuid4().hex
    proc = _launch(mark, tmp_path, mode="stay")
    try:
        _launcher_ready(proc, mark)
        _wait_ready(tmp_path)
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(signals.INTERRUPT_WINDOW_S + 0.3)
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 130, err
        # at once, not after the stuck rank (which never ends by itself): 2 s read 2.08 on a loaded 2-core host
        assert time.monotonic() - t0 < 5
        assert "ending torchrun and its ranks now, without waiting for a final checkpoint" in err
        assert _got(tmp_path) == [["SIGINT"], ["SIGINT"]]  # the second went to no rank
        left, _ = wait_gone(MARK, mark, 5, poll=0.02)
        assert not left
    finally:
        _kill_all(mark)


@linux_only
@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_stop_before_the_ranks_can_take_it_ends_the_run_at_once(tmp_path: Path, name: str) -> None:
    """As a single process dies of SIGTERM before its handler is in place: no checkpoint to save yet, and a
    rank that is not ready would die of it (or ignore it) and torchrun report a failure."""
    mark = uuid.uuid4().hex
    proc = _launch(mark, tmp_path, delay=60)
    try:
        _launcher_ready(proc, mark)
        sig = signal.Signals[name]
        os.kill(proc.pid, sig)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 128 + sig, err
        assert f"{name} before the ranks could take it" in err and "Traceback" not in err
        assert _got(tmp_path) == []
        left, _ = wait_gone(MARK, mark, 5, poll=0.02)
        assert not left
    finally:
        _kill_all(mark)


@linux_only
def test_a_launcher_started_with_sigint_ignored_keeps_ignoring_it(tmp_path: Path) -> None:
    """`stride train ... &` in a script starts with SIGINT ignored, so that Ctrl-C on the script leaves it be;
    Python keeps that, and so does the launcher."""
    mark = uuid.uuid4().hex
    proc = _launch(mark, tmp_path, sigint_ignored=True)
    try:
        _launcher_ready(proc, mark)
        _wait_ready(tmp_path)
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None and _got(tmp_path) == []
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0
        assert _got(tmp_path) == [["SIGTERM"], ["SIGTERM"]]
    finally:
        _kill_all(mark)


def test_sigint_is_a_stop_signal_unless_ignored() -> None:
    assert signal.SIGINT in signals.SIGNALS
    assert signals.repeat_window(signal.SIGINT) == signals.INTERRUPT_WINDOW_S < signals.REPEAT_WINDOW_S
    assert signals.repeat_window(signal.SIGTERM) == signals.REPEAT_WINDOW_S
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    sig = signals.PreemptionSignal()
    try:
        assert sig.install()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == sig._handle  # noqa: SLF001
    finally:
        sig.uninstall()
        signal.signal(signal.SIGINT, before)


def test_a_second_sigint_after_its_window_goes_to_the_previous_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    """A single process: Ctrl-C again a second later raises KeyboardInterrupt, as Ctrl-C did before."""
    clock = [100.0]
    monkeypatch.setattr(signals.time, "monotonic", lambda: clock[0])
    ended: list[int] = []
    before = signal.signal(signal.SIGINT, lambda signum, frame: ended.append(signum))  # stands in for Python's
    sig = signals.PreemptionSignal()
    try:
        assert sig.install()
        os.kill(os.getpid(), signal.SIGINT)
        clock[0] += signals.INTERRUPT_WINDOW_S - 0.01
        os.kill(os.getpid(), signal.SIGINT)  # a copy
        assert (sig.received, sig.repeats, ended) == (signal.SIGINT, 1, [])
        clock[0] += 0.02
        os.kill(os.getpid(), signal.SIGINT)
        assert ended == [signal.SIGINT]
    finally:
        sig.uninstall()
        signal.signal(signal.SIGINT, before)


def test_proc_helpers_see_children_and_handlers() -> None:
    if torchrun._children(os.getpid()) is None:  # noqa: SLF001
        pytest.skip("no /proc")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in torchrun._children(os.getpid())  # noqa: SLF001
    finally:
        child.kill()
        child.wait()
    before = signal.signal(signal.SIGUSR2, lambda *a: None)
    try:
        assert torchrun._catches(os.getpid(), (signal.SIGUSR2,))  # noqa: SLF001
    finally:
        signal.signal(signal.SIGUSR2, before)
    assert torchrun._nproc_of(torchrun.torchrun_command(["c.toml"], nproc=3)) == 3  # noqa: SLF001


# -- the real thing: 2 gloo ranks, FSDP2 --

def _config(path: Path, steps: int) -> Path:
    return tiny_config(path, steps, "stop", 100000)



SAVED = re.compile(r"stride checkpoint: (SIG\w+) at step (\d+)(?: \(received by another rank\))?: checkpoint "
                   r"(step_\d+) committed")


# The stops of the real run below, one after another: every signal, and both targets.
STOP_CHAIN = (("SIGTERM", "launcher"), ("SIGINT", "group"), ("SIGUSR1", "group"))


@linux_only
@pytest.mark.dist
@pytest.mark.slow
def test_stopped_nproc_runs_save_once_exit_0_and_the_same_command_resumes(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """One run stopped three times (STOP_CHAIN), each time resumed by the same command, which the next stop then
    interrupts; the last resume trains to the end. Every stop is checked as one of a fresh run was (exit status 0
    within 30 s, no traceback, one line for the run naming its signal, exactly one new checkpoint, of that step,
    no summary.json) and every resume continues at the step its stop saved. (One chain of 4 launches where
    three separate runs took 6; the fast tests above cover every signal with both targets.)"""
    mark = uuid.uuid4().hex
    steps = 90  # stops come 5 steps into each launch: about step 5, 10 and 15 (a step here is 15-40 ms)
    cfg, out = _config(tmp_path / "c.toml", steps), tmp_path / "run"
    # keep_last 3: all three stops' checkpoints stay, so each stop's new folder is plain to see
    cmd = [sys.executable, "-m", "stride", "train", str(cfg), "--nproc", "2", "--set", "parallel.dp_shard=2",
           "--set", "checkpoint.keep_last=3", "--out", str(out), "--no-progress"]
    step = 0  # the step the previous stop saved, where this launch continues
    try:
        for name, target in STOP_CHAIN:
            before = sorted(p.name for p in (out / "checkpoints").glob("step_*"))
            proc = subprocess.Popen(cmd, env=_env(mark), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
            deadline = time.monotonic() + 180
            while newest_step(out) < step + 5 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.02)
            assert proc.poll() is None and newest_step(out) >= step + 5, proc.communicate()[1][-3000:]
            _send(proc.pid, signal.Signals[name], target)
            t0 = time.monotonic()
            _, err = proc.communicate(timeout=60)
            took = time.monotonic() - t0
            assert proc.returncode == 0, err[-3000:]
            assert "Traceback" not in err and "SignalException" not in err, err[-3000:]
            if step:  # the same command resumed from the previous stop
                assert f"continuing at step {step}" in err, err[-3000:]
            saves = SAVED.findall(err)
            assert saves and {s[0] for s in saves} == {name}, err[-3000:]
            assert len(saves) == 1, err[-3000:]  # one line for the run (rank 0), not one per rank
            previous, step = step, int(saves[0][1])
            assert previous < step < steps
            assert sorted(p.name for p in (out / "checkpoints").glob("step_*")) == [*before, f"step_{step:08d}"]
            assert not (out / "summary.json").exists()
            assert took < 30, (name, target, took)

        # the last resume, which no signal stops, with this process as its launcher (tests/launch_guard.py)
        for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", lifeline.ENV_LAUNCHER,
                    "STRIDE_RUN_LOCK"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("PYTHONPATH", str(REPO))
        capfd.readouterr()
        with children_killed_after(300):
            rc = main(cmd[3:])
        err = capfd.readouterr().err
        assert rc == 0, err[-3000:]
        assert f"continuing at step {step}" in err, err[-3000:]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["steps"] == steps and summary["checkpoint"]["resumed_from"] == f"step_{step:08d}"
    finally:
        _kill_all(mark)
