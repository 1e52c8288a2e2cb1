"""`stride top DIR` started before `stride train --out DIR` makes the folder (outside audit, defect 4).

Before: a live follower exited 2 at once ("no such directory"). Now it says once that it waits for the folder, and
follows the run when it appears, within its --timeout; at the timeout with no folder it names it, exit 2. `--once`
on a missing folder stays an immediate error.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tiny_run import MLP_TINY_TOML

from stride.cli.main import main


def _top(run: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "stride.cli.main", "top", str(run), "--interval", "0.1", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_live_follower_waits_for_the_folder_and_follows_the_run(tmp_path: Path) -> None:
    run = tmp_path / "RUN"
    top = _top(run, "--timeout", "120")
    try:
        time.sleep(1.0)  # top is up, the folder is not
        assert top.poll() is None, top.communicate()
        (tmp_path / "c.toml").write_text(MLP_TINY_TOML)
        assert main(["train", str(tmp_path / "c.toml"), "--out", str(run)]) == 0
        out, err = top.communicate(timeout=90)
    finally:
        if top.poll() is None:
            top.kill()
    assert top.returncode == 0, err
    assert err.count("waiting") == 1 and f"{run} does not exist yet: waiting for the run to create it" in err
    assert "4 / 4  (finished)" in out


def test_a_folder_that_never_appears_is_named_at_the_timeout(tmp_path: Path) -> None:
    run = tmp_path / "never"
    t0 = time.monotonic()
    top = _top(run, "--timeout", "1")
    out, err = top.communicate(timeout=60)
    assert top.returncode == 2 and time.monotonic() - t0 >= 1.0
    assert f"{run}: no such directory after waiting 1 s (--timeout)" in err


def test_once_on_a_missing_folder_is_an_immediate_error(tmp_path: Path, capsys) -> None:
    assert main(["top", str(tmp_path / "nope"), "--once"]) == 2
    assert "no such directory" in capsys.readouterr().err
