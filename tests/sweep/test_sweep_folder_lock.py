"""`stride sweep --out X` locks X before it writes anything (audit 16, L4): a second sweep on X was stopped only by a
point's run folder, after it had written its report into the first sweep's folder. A sweep's points still lock
their own run folders inside it (the sweep's lock `nests` them: Ray tasks are other processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.files.owner import this_host

HOLD = """
import sys
from pathlib import Path
from stride.files import run_lock
run_lock.acquire(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


def test_a_second_sweep_on_a_running_sweeps_folder_is_refused_before_writing(
        config: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)  # the first sweep, running
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        before = sorted(p.name for p in out.iterdir())
        code = main(["sweep", str(config), "--grid", "train.seed=1,2", "--pack", "1", "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 1
        assert f"stride sweep: sweep folder {out} is in use by another stride run (pid {holder.pid} on {this_host()}" \
            in err
        assert sorted(p.name for p in out.iterdir()) == before  # no sweep.json, no report, no runs/
    finally:
        holder.kill()
        holder.wait()


def test_the_sweep_folder_lock_nests_its_points(config: Path, tmp_path: Path) -> None:
    """The lock names the sweep and lets its points' run folders be locked by other processes."""
    out = tmp_path / "sweep"
    assert main(["sweep", str(config), "--grid", "train.seed=1,2", "--pack", "1", "--out", str(out)]) == 0
    info = json.loads((out / ".stride-lock").read_text())
    assert info["what"] == "sweep folder" and info["nests"] is True
    assert sorted(p.name for p in (out / "runs").iterdir())  # the points' own run folders
