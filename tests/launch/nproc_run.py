"""For the tests that launch real `--nproc` runs: a tiny 2-rank config, a reader of its progress, and the
processes of one test's job, found by a mark every one of them inherits in its environment."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import textwrap
import time
from pathlib import Path


def tiny_config(path: Path, steps: int, name: str, checkpoint_every: int) -> Path:
    path.write_text(textwrap.dedent(f"""
        [train]
        name = "{name}"
        threads = 1
        steps = {steps}
        val_every = 0
        batch_size = 8
        [model]
        d_model = 32
        n_layers = 2
        [data]
        n_assets = 4
        n_steps = 600
        seq_len = 16
        [metrics]
        flops = false
        log_every = 1
        [checkpoint]
        enabled = true
        every = {checkpoint_every}
    """))
    return path


def steps_logged(out: Path) -> int:
    try:
        return sum('"loss"' in line for line in (out / "metrics.jsonl").read_text().splitlines())
    except OSError:
        return 0


def newest_step(out: Path) -> int:
    """The newest step with a loss record in metrics.jsonl (0: none yet). A resumed run first cuts the file back to
    the step it continues at, so this counts the steps of the launch that runs now, as `steps_logged` cannot."""
    newest = 0
    try:
        lines = (out / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if '"loss"' not in line:
            continue
        try:
            newest = max(newest, int(json.loads(line)["step"]))
        except (ValueError, KeyError, TypeError):  # a line the writer has not finished
            continue
    return newest


def marked(var: str, mark: str) -> list[int]:
    """Live processes (zombies have no environment left) whose environment holds `var`=`mark`."""
    needle = f"{var}={mark}\0".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if needle in f.read():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def wait_gone(var: str, mark: str, timeout: float, poll: float = 0.05) -> tuple[list[int], float]:
    """The marked processes left after waiting up to `timeout` for none, and the seconds waited."""
    t0 = time.monotonic()
    while (left := marked(var, mark)) and time.monotonic() - t0 < timeout:
        time.sleep(poll)
    return left, time.monotonic() - t0


def kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
