"""A followed file is read in ranges through the input-file checks, and a run folder's lock file is never followed.

Audit 14 (M3): `stride top` read metrics.jsonl with a plain `open()` (a FIFO hung it, a /dev/zero link filled the
memory); `read_input_range` is the guarded read it now uses. `stride train --out` on a folder whose `.stride-lock`
was a link to /dev/zero said only "Invalid argument"; a link to another file had this process's name written into
that file. The lock file is now opened without following a link, and anything but a regular file is refused
naming it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stride.files import run_lock
from stride.files.input_file import InputFileMissing, InputFileTooLarge, NotARegularFile, read_input_range


def test_read_input_range_reads_from_an_offset_up_to_a_count(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_bytes(b"0123456789")
    assert read_input_range(p, 3, 4, limit=100) == b"3456"
    assert read_input_range(p, 8, 100, limit=100) == b"89"
    assert read_input_range(p, 20, 4, limit=100) == b""
    with pytest.raises(InputFileTooLarge, match=r"is 10 bytes, over the limit of 5 bytes"):
        read_input_range(p, 0, 1, limit=5)
    with pytest.raises(InputFileMissing):
        read_input_range(tmp_path / "none.jsonl", 0, 1, limit=100)


@pytest.mark.parametrize(("make", "kind"), [(lambda p: p.symlink_to("/dev/zero"), "a character device"),
                                            (os.mkfifo, "a FIFO")])
def test_read_input_range_refuses_what_is_not_a_regular_file(tmp_path: Path, make, kind: str) -> None:
    p = tmp_path / "metrics.jsonl"
    make(p)
    with pytest.raises(NotARegularFile, match=f"run file {p} is {kind}, not a regular file"):
        read_input_range(p, 0, 1 << 20, limit=None, what="run file")


@pytest.mark.parametrize(("make", "kind"), [
    (lambda p, victim: p.symlink_to("/dev/zero"), "a symbolic link (to /dev/zero)"),
    (lambda p, victim: p.symlink_to(victim), "a symbolic link (to "),
    (lambda p, victim: os.mkfifo(p), "a FIFO"),
])
def test_a_lock_file_that_is_not_a_regular_file_is_refused_and_nothing_written_through_it(tmp_path: Path, make,
                                                                                           kind: str) -> None:
    folder, victim = tmp_path / "run", tmp_path / "victim.txt"
    folder.mkdir()
    victim.write_text("not stride's")
    make(folder / run_lock.LOCK_NAME, victim)
    with pytest.raises(run_lock.LockFileError) as err:
        run_lock.acquire(folder)
    assert str(err.value).startswith(f"run folder {folder}: its lock file {folder / run_lock.LOCK_NAME} is {kind}")
    assert err.value.exit_code == 2
    assert victim.read_text() == "not stride's"
    assert not any(p.parent == folder.resolve() for p in run_lock._held)  # nothing held


def test_a_plain_lock_file_is_still_taken_and_put_back(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    path = run_lock.acquire(folder)
    assert path == folder.resolve() / run_lock.LOCK_NAME and '"pid"' in path.read_text()
    run_lock.release(path, restore=True)
    assert not path.exists()
