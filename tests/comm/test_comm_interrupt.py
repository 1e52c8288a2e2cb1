"""Ctrl-C in a command that does not handle it itself: one line, exit status 130, no traceback (stride.cli.main);
`stride comm` also ends its ranks.

Before (audit 7, #8): `stride comm`, `stride sweep` and `stride data ...` printed a Python traceback on Ctrl-C;
and a `stride comm` rank that Ctrl-C caught while it imported torch left the other rank waiting in the
rendezvous, and the command waiting for it at exit, until killed.
"""

from __future__ import annotations

import multiprocessing
import signal
import time

import pytest

import stride.comm.launch
from stride.cli.main import INTERRUPTED, main


def test_an_interrupted_command_is_one_line_and_130(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(args):
        raise KeyboardInterrupt

    import stride.cli.top

    monkeypatch.setattr(stride.cli.top, "run", interrupted)  # registered as the command's func in main()
    assert main(["top", "RUN"]) == INTERRUPTED == 130
    cap = capsys.readouterr()
    assert cap.err == "stride top: stopped (interrupted)\n" and cap.out == ""


def _stuck_rank() -> None:
    """A rank waiting inside C++ (the rendezvous): SIGINT does not end it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    time.sleep(120)


def test_comm_interrupted_ends_its_ranks(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C while run_spawned waits on its ranks: it ends them (SIGTERM), and the command prints one line."""
    ctx = multiprocessing.get_context("fork")
    started: list = []

    class Group:  # what torch.multiprocessing.start_processes returns, with one rank stuck in the rendezvous
        def __init__(self) -> None:
            rank = ctx.Process(target=_stuck_rank)
            rank.start()
            started.append(rank)
            self.processes = [rank]

        def join(self) -> bool:
            raise KeyboardInterrupt  # Ctrl-C while the ranks run

    monkeypatch.setattr(stride.comm.launch.mp, "start_processes", lambda *a, **k: Group())
    t0 = time.monotonic()
    assert main(["comm", "--nproc", "2", "--max-bytes", "1K"]) == 130
    assert time.monotonic() - t0 < 30
    assert capsys.readouterr().err.strip().splitlines() == ["stride comm: stopped (interrupted)"]
    assert len(started) == 1 and not started[0].is_alive() and started[0].exitcode == -signal.SIGTERM


def test_ctrl_c_to_the_whole_group_prints_one_line_and_no_rank_traceback() -> None:
    """A terminal's Ctrl-C reaches every process of its group: the ranks too, which (started while torch was still
    importing in them) each printed a KeyboardInterrupt traceback. They now start with SIGINT ignored and this
    process ends them."""
    import os
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "stride", "comm", "--nproc", "2", "--max-bytes", "64M"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:  # the ranks are started: Ctrl-C then
        kids = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        if len(kids) >= 2:
            break
        time.sleep(0.05)
    time.sleep(0.5)  # the ranks are importing torch
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "stride comm: stopped (interrupted)", err
