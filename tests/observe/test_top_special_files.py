"""`stride top` reads only regular run files, each up to a size, and names the one it refuses (audit 14, M3).

A metrics.jsonl or .stride-lock that is a link to /dev/zero grew `top` to 24 GB (a MemoryError under a 4 GB limit),
and a metrics.jsonl that is a FIFO hung `top --once`. Each is now one line naming the file (exit status 2). The
refusals run in a child process under a memory limit and a timeout, so the code before the fix fails the test
rather than the machine.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from stride.cli import top
from stride.cli.main import main
from stride.metrics.observe import follow


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def _top_once(run: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stride", "top", str(run), "--once"], capture_output=True, text=True,
                          timeout=60, cwd=run.parent, preexec_fn=_limited)


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text("[train]\nsteps = 4\n")
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    return run


@pytest.mark.parametrize(("name", "make", "kind"), [
    ("metrics.jsonl", lambda p: p.symlink_to("/dev/zero"), "a character device"),
    ("metrics.jsonl", os.mkfifo, "a FIFO"),
    ("system.jsonl", lambda p: p.symlink_to("/dev/zero"), "a character device"),
    (".stride-lock", lambda p: p.symlink_to("/dev/zero"), "a character device"),
])
def test_a_run_file_that_is_a_device_or_fifo_is_named_not_read(tmp_path: Path, name: str, make, kind: str) -> None:
    run = _run(tmp_path)
    (run / name).unlink(missing_ok=True)
    make(run / name)
    res = _top_once(run)
    assert res.returncode == 2, res.stderr[-2000:]
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("stride top: ") and f"{run / name} is {kind}, not a regular file" in err, err


def test_a_line_without_a_newline_may_not_grow_without_bound(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(tmp_path)
    monkeypatch.setattr(follow, "LINE_MAX_BYTES", 1000)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "loss": "' + "x" * 2000)  # no newline: held back, but not past LINE_MAX_BYTES
    assert main(["top", str(run), "--once"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"stride top: {run / 'metrics.jsonl'}: line 2 runs past 1000 bytes without a newline: not a line "
                   "stride writes (a record is under 1 KiB)"), err


def test_a_followed_file_is_read_in_pieces_and_keeps_the_last_records(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run(tmp_path)
    monkeypatch.setattr(follow, "READ_BYTES", 64)  # many pieces, lines cut across them
    monkeypatch.setattr(top, "KEEP_RECORDS", 5)
    with open(run / "metrics.jsonl", "w") as f:
        f.writelines(f'{{"step": {i}, "loss": {1 / i}}}\n' for i in range(1, 41))
    view = top.RunView(run)
    view.refresh()
    assert [r["step"] for r in view.train] == [36, 37, 38, 39, 40]
    assert view.metrics.offset == (run / "metrics.jsonl").stat().st_size


def test_values_from_run_files_are_shown_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Audit 14 (M1, M2; top was outside the output-side fix's files): `{"step": "[/bold]"}` in metrics.jsonl ended
    `top` with rich's MarkupError, and an ESC sequence in system.jsonl's gpu index reached the terminal raw."""
    run = _run(tmp_path)
    (run / "metrics.jsonl").write_text('{"step": "[/bold]", "loss": 1.0}\n')
    (run / "system.jsonl").write_text('{"gpus": [{"index": "0\\u001b]0;PWNED\\u001b\\\\"}]}\n')
    assert main(["top", str(run), "--once"]) == 0
    out = capsys.readouterr().out
    assert "step [/bold]" in out and "gpu0\\x1b]0;PWNED\\x1b\\" in out and "\x1b" not in out, out
