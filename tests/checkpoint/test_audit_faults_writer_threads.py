"""A file that one of DCP's writer threads fails to write fails the save (outside audit of checkpoints under faults,
2026-12-07).

DCP's FileSystemWriter writes a rank's files from `thread_count` threads (stride asks for up to 4). Before, an error
in an extra thread (an I/O error, a full disk at the file's flush) only ended that thread with a traceback on
stderr: its files dropped out of the save's results and the save committed, its manifest verifying, without them
(`__0_0.distcp` missing from step_00000006, exit 0), and retention (`keep_last = 1`) deleted the good step_00000003.
Such a checkpoint cannot be loaded. Now the save fails on that error with one line, the previous checkpoint is kept,
and the same command resumes from it exactly. A full disk through the command line now prints that one line only
(it printed DCP's thread's 30-line traceback above it).
"""

from __future__ import annotations

import contextlib
import errno
import threading
from pathlib import Path

import pytest
from ckpt_helpers import fit, reference_sha
from torch.distributed.checkpoint.filesystem import FileSystem

from stride.checkpoint import CheckpointError, verify

EXTRA = "_write_files_from_queue"  # DCP's extra writer threads are named "Thread-N (_write_files_from_queue)"


@pytest.mark.parametrize(("when", "async_save"), [("open", False), ("flush", True)], ids=["open-sync", "flush-async"])
def test_a_file_failing_in_a_dcp_writer_thread_fails_the_save_and_keeps_the_previous(
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, when: str, async_save: bool) -> None:
    real = FileSystem.create_stream
    failed: list[str] = []

    @contextlib.contextmanager
    def failing(self, path, mode):
        hit = EXTRA in threading.current_thread().name and "step_00000006" in str(path) and not failed
        if hit:
            failed.append(Path(path).name)
            if when == "open":
                raise OSError(errno.EIO, "Input/output error", str(path))
        with real(self, path, mode) as stream:
            yield stream
        if hit:  # the file's last write or its fsync on a disk that just filled up
            raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(FileSystem, "create_stream", failing)
    out, ov = tmp_path / "run", ("checkpoint.keep_last=1", f"checkpoint.async_save={str(async_save).lower()}")
    with pytest.raises(CheckpointError) as exc:
        fit(out, *ov)
    assert failed, "no file was written by an extra DCP writer thread: the test no longer injects anything"
    msg = str(exc.value)
    cause = "Input/output error" if when == "open" else "the disk is full"
    assert msg.startswith(f"checkpoint save at step 6 into {out / 'checkpoints'} failed: ") and cause in msg, msg
    assert msg.endswith("; the previous checkpoint step_00000003 is intact"), msg
    assert "Exception in thread" not in capsys.readouterr().err  # no thread's traceback, the one error only
    ck = out / "checkpoints"
    assert sorted(p.name for p in ck.iterdir()) == ["step_00000003"] and verify(ck / "step_00000003").ok
    monkeypatch.setattr(FileSystem, "create_stream", real)
    s = fit(out, *ov)
    assert s["checkpoint"]["resumed_from"] == "step_00000003" and s["params_sha256"] == reference_sha()
