"""`stride top` on a run whose process is gone without a summary.json: says so and stops following (exit 1).

Before (audit 7, #9): a killed run (no summary.json; its `.stride-lock` naming a pid that no longer exists) was
followed forever, the frame reading as if the run were live.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.cli.top import writer_gone
from stride.files.owner import this_host
from stride.files.run_lock import LOCK_NAME


def dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def fake_run(folder: Path, pid: int, host: str | None = None, steps: int = 3) -> Path:
    """A run folder as a killed `stride train` leaves it: config, some logged steps, the lock file, no summary."""
    folder.mkdir()
    (folder / "config.toml").write_text("[train]\nsteps = 100\n")
    (folder / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "loss": 1.0 / s, "lr": 1e-3, "step_time_s": 0.01, "samples_per_s": 3200.0}) + "\n"
        for s in range(1, steps + 1)))
    (folder / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": host or this_host(), "since": time.time()}))
    return folder


def test_top_stops_following_a_run_whose_process_is_gone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pid = dead_pid()
    run = fake_run(tmp_path / "run", pid)
    t0 = time.monotonic()
    rc = main(["top", str(run), "--interval", "0.01", "--timeout", "30"])
    cap = capsys.readouterr()
    assert rc == 1 and time.monotonic() - t0 < 20  # not the timeout
    assert f"3 / 100  (process gone: pid {pid})" in cap.out
    assert cap.err.strip().splitlines() == [
        f"stride top: the run's process (pid {pid}) is gone and wrote no summary.json; showing the last logged step "
        "(3); stopped following"]


def test_once_says_the_process_is_gone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pid = dead_pid()
    run = fake_run(tmp_path / "run", pid)
    assert main(["top", str(run), "--once"]) == 0
    cap = capsys.readouterr()
    assert f"(process gone: pid {pid})" in cap.out
    assert cap.err.strip() == (f"stride top: the run's process (pid {pid}) is gone and wrote no summary.json; "
                               "showing the last logged step (3)")


@pytest.mark.parametrize("case", ["alive", "other_host", "no_lock", "garbage_lock", "list_lock"])
def test_a_writer_that_may_live_is_followed(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """This process (alive), a pid of another host (cannot be checked here), no lock file or no name in it: the run
    is followed as before, until --timeout (exit 0), with nothing said about a gone process."""
    pid = os.getpid() if case == "alive" else dead_pid()
    run = fake_run(tmp_path / "run", pid, host="elsewhere" if case == "other_host" else None)
    if case == "no_lock":
        (run / LOCK_NAME).unlink()
    elif case == "garbage_lock":
        (run / LOCK_NAME).write_text("{not json")
    elif case == "list_lock":
        (run / LOCK_NAME).write_text(json.dumps([pid]))
    assert writer_gone(run) is None
    assert main(["top", str(run), "--interval", "0.01", "--timeout", "0.1"]) == 0
    cap = capsys.readouterr()
    assert "gone" not in cap.out + cap.err


def test_a_finished_run_is_not_called_gone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = fake_run(tmp_path / "run", dead_pid())  # its process ended, as every finished run's does
    (run / "summary.json").write_text(json.dumps({"steps": 3, "status": "done"}))
    assert main(["top", str(run), "--interval", "0.01", "--timeout", "30"]) == 0
    cap = capsys.readouterr()
    assert "(finished)" in cap.out and "gone" not in cap.out + cap.err
