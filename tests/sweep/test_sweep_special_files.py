"""A sweep directory's files are read only as regular files, each up to a size (audit 14, M3).

sweep.json, packs.jsonl or a point file that was a link to /dev/zero made a resumed `stride sweep` read until a
MemoryError (its traceback); a FIFO would have hung it. Each is now one line naming the file (exit status 2),
before anything is trained. The resume runs in a child process under a memory limit and a timeout, so the code
before the fix fails the test rather than the machine.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stride.cli.main import main

GRID = ["--grid", "optim.lr=1e-3,3e-3", "--pack", "2"]


@pytest.fixture(scope="module")
def finished(config, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sw") / "s"
    assert main(["sweep", str(config), *GRID, "--out", str(out)]) == 0
    return out


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


@pytest.mark.parametrize("which", ["sweep.json", "packs.jsonl", "point"])
@pytest.mark.parametrize(("make", "kind"), [(lambda p: p.symlink_to("/dev/zero"), "a character device"),
                                            (os.mkfifo, "a FIFO")])
def test_a_sweep_file_that_is_a_device_or_fifo_is_named_not_read(config, finished, tmp_path: Path, which: str,
                                                                  make, kind: str) -> None:
    out = Path(shutil.copytree(finished, tmp_path / "s"))
    target = out / which if which != "point" else sorted((out / "points").glob("*.json"))[0]
    target.unlink()
    make(target)
    res = subprocess.run([sys.executable, "-m", "stride", "sweep", str(config), *GRID, "--out", str(out)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, preexec_fn=_limited)
    err = res.stderr.strip()
    assert res.returncode == 2, err[-2000:]
    assert "Traceback" not in err and f"{target} is {kind}, not a regular file" in err.splitlines()[-1], err
