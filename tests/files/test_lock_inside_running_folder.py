"""A folder inside another running stride process's locked folder is refused, naming that folder and its holder
(audit 16, M2): a second run whose `checkpoint.dir` was a running run's checkpoint folder locked a lock file of its
own there, resumed from the first run's checkpoints and replaced them; the reverse (`--out` inside a running run's
folder) was not refused either. A checkpoint folder inside the run's own folder stays covered by its run's lock."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tiny_run import MLP_TINY_TOML

from stride.cli.main import main
from stride.files import run_lock
from stride.files.owner import this_host

HOLD = """
import sys
from pathlib import Path
from stride.files import run_lock
run_lock.acquire(Path(sys.argv[1]), sys.argv[2], nests=sys.argv[3] == "1")
print("held", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def held_by_another(folder: Path, what: str = "run folder", nests: bool = False) -> Iterator[int]:
    """`folder` locked by another process for the block; its pid."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), what, "1" if nests else "0"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline() == "held\n"
        yield p.pid
    finally:
        p.kill()
        p.wait()


def test_a_checkpoint_folder_inside_a_running_runs_folder_is_refused(tmp_path: Path) -> None:
    a = tmp_path / "A"
    with held_by_another(a) as pid:
        with pytest.raises(run_lock.FolderInUse) as err:
            run_lock.acquire(a / "checkpoints", "checkpoint folder")
        msg = str(err.value)
        assert msg.startswith(f"checkpoint folder {a / 'checkpoints'} is inside run folder {a.resolve()}, in use by "
                              f"another stride run (pid {pid} on {this_host()}, since ")
        assert "\n" not in msg and not (a / "checkpoints").exists()  # refused before anything was made
        with pytest.raises(run_lock.FolderInUse, match=f"run folder {a / 'x' / 'y'} is inside run folder"):
            run_lock.acquire(a / "x" / "y")  # the reverse: --out inside a running run's folder
    path = run_lock.acquire(a / "checkpoints", "checkpoint folder")  # that run is gone: free
    run_lock.release(path)


def test_the_checkpoint_folder_a_running_run_locked_is_not_covered_by_this_runs_folder(tmp_path: Path) -> None:
    """B runs with checkpoint.dir=A/checkpoints; then A (this process) starts with --out A: A's checkpoint folder is
    not covered by A's run folder lock, and acquiring it names B."""
    a = tmp_path / "A"
    with held_by_another(a / "checkpoints", "checkpoint folder") as pid:
        lock = run_lock.acquire(a)
        try:
            assert not run_lock.covered(a / "checkpoints")
            with pytest.raises(run_lock.FolderInUse, match=rf"checkpoint folder .* is in use by another stride run "
                                                           rf"\(pid {pid} on "):
                run_lock.acquire(a / "checkpoints", "checkpoint folder")
        finally:
            run_lock.release(lock)
    lock = run_lock.acquire(a)
    try:
        assert run_lock.covered(a / "checkpoints")  # the usual case: covered by the run folder's lock
    finally:
        run_lock.release(lock)


def test_a_folder_that_holds_other_processes_runs_is_no_reason_to_refuse(tmp_path: Path) -> None:
    """A sweep's folder (`nests`): its points' run folders are locked by other processes (Ray tasks)."""
    x = tmp_path / "sweep"
    with held_by_another(x, "sweep folder", nests=True):
        path = run_lock.acquire(x / "runs" / "p1")
        run_lock.release(path)


def test_a_linked_lock_file_above_is_not_followed(tmp_path: Path) -> None:
    """A `.stride-lock` above that is a link (to a held lock file) is never opened through the link."""
    a, b = tmp_path / "A", tmp_path / "B"
    with held_by_another(a):
        b.mkdir()
        os.symlink(a / run_lock.LOCK_NAME, b / run_lock.LOCK_NAME)
        path = run_lock.acquire(b / "sub")
        run_lock.release(path)


TOML = MLP_TINY_TOML


def test_stride_train_with_a_running_runs_checkpoint_folder_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(TOML)
    a, b = tmp_path / "A", tmp_path / "B"
    err = io.StringIO()
    with held_by_another(a) as pid, contextlib.redirect_stderr(err):
        code = main(["train", str(cfg), "--out", str(b), "--set", "checkpoint.enabled=true",
                     "--set", f"checkpoint.dir={a / 'checkpoints'}"])
    lines = err.getvalue().strip().splitlines()
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"stride train: checkpoint folder {a / 'checkpoints'} is inside run folder "
                               f"{a.resolve()}, in use by another stride run (pid {pid} on {this_host()}")
    assert not (a / "checkpoints").exists()
