"""Issue 19, case 9: a full disk is one line, and leaves no temporary file behind.

Simulated with a real size-limited tmpfs (needs root / CAP_SYS_ADMIN; skipped elsewhere): the disk is
filled before the run (full at start), or by a callback at the end of training, just before summary.json
is written (checkpoints off). Before, both ended in a traceback, the second leaving `.summary.json.tmp-*`.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch
from ckpt_helpers import mounted_tmpfs, write_config
from fault_helpers import one_line_error, stride_main

from stride.train import trainer as tr
from stride.train.callbacks import Callback, TrainerView


@pytest.fixture
def tiny_disk(tmp_path: Path):
    yield from mounted_tmpfs(tmp_path / "disk", "256k")


def fill(folder: Path) -> None:
    """Write until the file system says it is full."""
    fd = os.open(folder / f"filler-{len(list(folder.iterdir()))}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 16, 4096, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)


def _leftovers(run: Path) -> list[str]:
    return [p.name for p in run.iterdir() if ".tmp" in p.name] if run.exists() else []


def test_a_full_disk_at_start_is_one_line(tmp_path: Path, tiny_disk: Path) -> None:
    cfg = write_config(tmp_path / "run.toml", "checkpoint.enabled=false")
    fill(tiny_disk)
    run = tiny_disk / "run"
    res = stride_main("train", str(cfg), "--out", str(run), "--no-progress")
    torch.use_deterministic_algorithms(False)
    one_line_error(res, str(run), "the disk is full", codes=(1,))
    assert _leftovers(run) == []


def test_a_disk_filling_up_before_the_summary_is_one_line_and_leaves_no_temporary(tmp_path: Path, tiny_disk: Path,
                                                                               monkeypatch) -> None:
    cfg = write_config(tmp_path / "run.toml", "checkpoint.enabled=false")
    run = tiny_disk / "run"

    class FillAtEnd(Callback):
        def on_fit_end(self, trainer: TrainerView, summary: dict) -> None:
            trainer.run_dir.close()  # metrics.jsonl flushed while there is room; then the disk fills
            fill(tiny_disk)

    init = tr.Trainer.__init__

    def with_filler(self: tr.Trainer, *args, callbacks=None, **kwargs) -> None:
        init(self, *args, callbacks=[*(callbacks or []), FillAtEnd()], **kwargs)

    monkeypatch.setattr(tr.Trainer, "__init__", with_filler)
    res = stride_main("train", str(cfg), "--out", str(run), "--no-progress")
    torch.use_deterministic_algorithms(False)
    one_line_error(res, "summary.json", "the disk is full", codes=(1,))
    assert _leftovers(run) == [] and not (run / "summary.json").exists()


def test_an_ingest_onto_a_full_disk_is_one_line_and_leaves_nothing(tmp_path: Path, tiny_disk: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "data"))
    from data_fixtures import write_parquet_dataset

    write_parquet_dataset(tmp_path / "src", ("A", "B", "C", "D"), n_days=150)  # 30000 rows x 20 bytes > 256 KiB
    res = stride_main("data", "ingest", str(tmp_path / "src"), "--out", str(tiny_disk / "st"))
    one_line_error(res, str(tiny_disk / "st"), "the disk is full", codes=(2,))
    assert sorted(p.name for p in tiny_disk.iterdir()) == []
