"""A rank that ends while the others run (killed, or failed) gets one launcher line naming it and saying what to
do next, after torchrun's own report (outside audit 11, F4: two tracebacks and no stride line). Driven with a
stand-in for torchrun: an agent that starts one worker per rank, each with its RANK, and, as torchrun's agent
does, ends the others and exits 1 when one fails."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from nproc_run import kill, marked

from stride.launch import lifeline

REPO = Path(__file__).resolve().parents[2]
MARK = "STRIDE_TEST_RANK_FAILURE_MARK"
linux_only = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds processes through /proc")

WORKER = "import time\nwhile True:\n    time.sleep(0.05)\n"
AGENT = textwrap.dedent("""
    import os, subprocess, sys, time
    n = int(sys.argv[1].split("=")[1])
    procs = [subprocess.Popen([sys.executable, "-c", sys.argv[2]], env={**os.environ, "RANK": str(r)},
                              start_new_session=True) for r in range(n)]
    while True:
        codes = [p.poll() for p in procs]
        if all(c == 0 for c in codes):
            sys.exit(0)
        if any(c not in (None, 0) for c in codes):
            time.sleep(0.3)  # torchrun: SIGTERM to the others, then time for them to end
            for p in procs:
                p.kill()
            sys.exit(1)
        time.sleep(0.1)  # torchrun's --monitor-interval
""")
# The launcher's watch, as the tests see it: after every look, the attempt and the ranks it knows of (alive or gone)
# go to $WATCH_FILE, so a test kills a rank once the watch has seen it rather than after a sleep (0.5 s, and 1.5 s
# past the once-a-second listing, were guesses that a loaded 2-core host can outlast)
SEEN = textwrap.dedent("""
    import os
    from stride.launch import torchrun
    _poll = torchrun._RankWatch.poll
    def poll(self, pid):
        _poll(self, pid)
        seen = ",".join(sorted({*self.live.values(), *self.gone}, key=int))
        tmp = os.environ["WATCH_FILE"] + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{self.attempt}:{seen}")
        os.replace(tmp, os.environ["WATCH_FILE"])
    torchrun._RankWatch.poll = poll
""")
LAUNCHER = SEEN + textwrap.dedent("""
    import os, sys
    from stride.launch.torchrun import run_torchrun
    sys.exit(run_torchrun([sys.executable, "-c", sys.argv[1], "--nproc-per-node=2", sys.argv[2]], dict(os.environ)))
""")


def _watch_saw(watch_file: Path, attempt: int, ranks: str, timeout: float = 60) -> None:
    """Wait until the launcher's watch has seen `ranks` ("0,1") of `attempt` (see SEEN)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if watch_file.read_text() == f"{attempt}:{ranks}":
                return
        time.sleep(0.02)
    raise AssertionError(f"the launcher's watch did not see ranks {ranks} of attempt {attempt} within {timeout} s")


def _rank_pid(mark: str, rank: str, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in marked(MARK, mark):
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"RANK={rank}\0".encode() in f.read():
                    return pid
        time.sleep(0.05)
    raise AssertionError(f"no rank {rank} process")


@linux_only
def test_the_rank_that_ended_first_is_named_once(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", lifeline.ENV_LAUNCHER)}
    seen = tmp_path / "watch"
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, AGENT, WORKER], env={**env, MARK: mark,
                            "PYTHONPATH": str(REPO), "WATCH_FILE": str(seen)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        victim = _rank_pid(mark, "1")
        _watch_saw(seen, 0, "0,1")
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 1
        lines = [ln for ln in err.splitlines() if ln.startswith("stride train:")]
        assert len(lines) == 1 and "rank 1 ended first" in lines[0] and "the same command resumes" in lines[0], err
    finally:
        kill(marked(MARK, mark))


@linux_only
def test_ranks_that_end_together_get_no_line(tmp_path: Path) -> None:
    from stride.launch.torchrun import _RankWatch

    watch = _RankWatch(2)
    watch.live = {10**9: "0", 10**9 + 1: "1"}  # pids that do not exist: both ended before this look
    watch.poll(os.getpid())
    assert watch.gone == [] and watch.live == {} and watch.failure_line(1) is None


@linux_only
def test_ranks_that_refuse_are_reported_as_a_refusal_with_exit_status_2(tmp_path: Path) -> None:
    """Rank 1 refuses to start (a config error: `stride train` exits 2 and notes it for the launcher) while rank 0
    runs on. torchrun calls that a failed child and exits 1, and the launcher's line read like a crash ("ended first
    ... killed, or it failed"): now the job's status is the refusal's, 2, with one line saying so (outside audit
    18)."""
    mark = uuid.uuid4().hex
    refuse = textwrap.dedent(f"""
        import os, sys, time
        if os.environ["RANK"] == "1":
            from stride.cli.main import main
            sys.exit(main(["train", {str(REPO / "configs" / "quickstart.toml")!r}, "--set", "foo.bar=1",
                           "--out", {str(tmp_path / "run")!r}]))
        while True:
            time.sleep(0.05)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", lifeline.ENV_LAUNCHER)}
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, AGENT, refuse], env={**env, MARK: mark,
                            "PYTHONPATH": str(REPO), "WATCH_FILE": str(tmp_path / "watch")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 2, err[-3000:]
        assert "stride train: config error: --set foo.bar=1: unknown section `foo`" in err
        lines = [ln for ln in err.splitlines() if ln.startswith("stride train:") and "config error" not in ln]
        assert len(lines) == 1 and lines[0].startswith("stride train: rank 1 refused"), err
        assert "exit status 2" in lines[0]
        assert "ended first" not in err
    finally:
        kill(marked(MARK, mark))


def test_a_refusal_of_an_earlier_attempt_is_cleared_when_the_rank_starts_again(tmp_path: Path, monkeypatch) -> None:
    """torchrun --max-restarts: rank 1 refused in attempt 1, then attempt 2 crashed: the crash is not a refusal."""
    from stride.launch import torchrun

    monkeypatch.setenv(torchrun.STATUS_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    torchrun.record_refusal()
    assert torchrun._refused_ranks(str(tmp_path)) == [1]
    torchrun.clear_refusal()  # what `stride train` does first in the next attempt
    assert torchrun._refused_ranks(str(tmp_path)) == []


RESTARTING_AGENT = textwrap.dedent("""
    import os, subprocess, sys, time
    n = int(sys.argv[1].split("=")[1])
    restarts = int(sys.argv[2].split("=")[1])
    for attempt in range(restarts + 1):  # torchrun --max-restarts: every worker started again after a failure
        procs = [subprocess.Popen([sys.executable, "-c", sys.argv[3]], start_new_session=True,
                                  env={**os.environ, "RANK": str(r), "TORCHELASTIC_RESTART_COUNT": str(attempt)})
                 for r in range(n)]
        while all(p.poll() is None for p in procs):
            time.sleep(0.1)
        time.sleep(0.3)
        for p in procs:
            p.kill()
            p.wait()
    sys.exit(1)
""")
RESTART_LAUNCHER = SEEN + textwrap.dedent("""
    import os, sys
    from stride.launch.torchrun import run_torchrun
    sys.exit(run_torchrun([sys.executable, "-c", sys.argv[1], "--nproc-per-node=2", "--max-restarts=1", sys.argv[2]],
                          dict(os.environ)))
""")


def _attempt_rank_pid(mark: str, rank: str, attempt: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    want = (f"RANK={rank}\0".encode(), f"TORCHELASTIC_RESTART_COUNT={attempt}\0".encode())
    while time.monotonic() < deadline:
        for pid in marked(MARK, mark):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
                if all(w in env for w in want):
                    return pid
        time.sleep(0.05)
    raise AssertionError(f"no rank {rank} process in attempt {attempt}")


@linux_only
def test_the_rank_named_is_the_last_attempts_after_a_restart(tmp_path: Path) -> None:
    """--max-restarts 1: rank 1 killed in the first attempt, rank 0 in the second, which ends the job. The line named
    rank 1 (the first attempt's, kept across the restart); it names rank 0 and says the restarts were used up."""
    mark = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", lifeline.ENV_LAUNCHER)}
    seen = tmp_path / "watch"
    proc = subprocess.Popen([sys.executable, "-c", RESTART_LAUNCHER, RESTARTING_AGENT, WORKER],
                            env={**env, MARK: mark, "PYTHONPATH": str(REPO), "WATCH_FILE": str(seen)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first = _attempt_rank_pid(mark, "1", 0)
        _watch_saw(seen, 0, "0,1")
        os.kill(first, signal.SIGKILL)
        second = _attempt_rank_pid(mark, "0", 1)
        _watch_saw(seen, 1, "0,1")  # the second attempt's ranks, found by the watch's once-a-second listing
        os.kill(second, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 1
        lines = [ln for ln in err.splitlines() if ln.startswith("stride train:")]
        assert len(lines) == 1 and "rank 0 ended first" in lines[0], err
        assert "after 1 restart (--max-restarts used up)" in lines[0], err
    finally:
        kill(marked(MARK, mark))
