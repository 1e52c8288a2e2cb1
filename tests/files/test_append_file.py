"""A run's line logs are appended to only where they are regular files (hostile-input audit: a resumed run folder
whose system.jsonl was a symbolic link appended 9 lines to the file it named, outside the folder)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stride.files.append_file import open_append
from stride.metrics.observe.system import SystemSampler


def test_a_regular_file_is_appended_to_and_a_missing_one_created(tmp_path: Path) -> None:
    p = tmp_path / "metrics.jsonl"
    with open_append(p) as f:
        f.write("a\n")
    with open_append(p) as f:
        f.write("b\n")
    assert p.read_text() == "a\nb\n"


def test_a_link_is_not_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("mine\n")
    link = tmp_path / "run" / "system.jsonl"
    link.parent.mkdir()
    link.symlink_to(outside)
    with pytest.raises(OSError, match="symbolic link"):
        open_append(link)
    with pytest.raises(OSError, match="symbolic link"):
        SystemSampler(60.0, link).start()
    assert outside.read_text() == "mine\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this OS")
def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "metrics.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="FIFO"):
        open_append(fifo)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").mkdir()
    with pytest.raises(OSError):
        open_append(tmp_path / "metrics.jsonl")


def test_a_run_folder_with_a_linked_log_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """The review of the first fix: a linked metrics.jsonl was refused at the first line, after the resumed run had
    trained and saved a checkpoint; the folder is now refused when opened."""
    from stride.metrics.run_dir import RunDir, RunDirError

    outside = tmp_path / "outside.txt"
    outside.write_text("mine\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").symlink_to(outside)
    with pytest.raises(RunDirError, match="metrics.jsonl is a symbolic link") as err:
        RunDir(run)
    assert err.value.exit_code == 2
    assert outside.read_text() == "mine\n" and not (run / ".stride-lock").exists()
