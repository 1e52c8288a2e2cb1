"""A store file written in place during a run, its size kept (audit 16 leftover): no fault tells the run, its
batches come from other bytes from then on. The checkpoint callback refuses to save such batches (every rank
alike), naming the file and the checkpoint to resume from; a run without checkpoints says so in its summary.

Before: `mapped_changes` compared inode and size only and nothing called it between steps, so a run trained on,
checkpointed and finished on a mix of the store's old and new bytes with nothing said.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from data_fixtures import write_parquet_dataset

from stride.checkpoint.errors import StoreChangedError
from stride.config import load_config
from stride.data.ingest import ingest
from stride.data.mapped_files import mapped_changes
from stride.data.store import StoreWriter, open_store
from stride.train.callbacks import Callback
from stride.train.trainer import Trainer


class WriteStoreAt(Callback):
    """At the end of step `at`, rewrite one value of the store's values.bin in place (size and inode kept)."""

    def __init__(self, store: Path, at: int) -> None:
        self.store, self.at = store, at

    def on_step_end(self, trainer) -> None:
        if trainer.step == self.at:
            with open(self.store / "values.bin", "r+b") as f:
                f.seek(64)
                f.write(np.float32(123.0).tobytes())
            # a write in the same second as the mapping keeps a coarse-clock file system's mtime: move it on
            st = os.stat(self.store / "values.bin")
            os.utime(self.store / "values.bin", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _config(store: Path, *more: str):
    return load_config(overrides=[
        "model.name=mlp", "data.source=store", f"data.store={store}", "data.seq_len=4", "data.horizons=[1]",
        "train.steps=6", "train.batch_size=4", "train.val_every=0", "train.threads=1", "metrics.progress=false",
        "metrics.flops=false", *more])


def _store(tmp_path: Path) -> Path:
    write_parquet_dataset(tmp_path / "src")
    return ingest(tmp_path / "src", tmp_path / "store")


def test_mapped_changes_sees_a_write_in_place_that_keeps_the_size(tmp_path: Path) -> None:
    w = StoreWriter(tmp_path / "s", ["a", "b"])
    w.append("A", np.arange(512, dtype=np.int64) + 1, np.ones((512, 2), np.float32))
    store = w.commit()
    s = open_store(store)
    mine = str(store.resolve())
    WriteStoreAt(store, 1).on_step_end(type("T", (), {"step": 1})())
    assert [c for c in mapped_changes() if mine in c] == [
        f"{(store / 'values.bin').resolve()} was written in place (same size, modified since it was mapped)"]
    # a file replaced by a new one (a rename over it) leaves the map on the old bytes: not an in-place change
    (store / "timestamps.bin").rename(tmp_path / "old-ts")
    (store / "timestamps.bin").write_bytes((tmp_path / "old-ts").read_bytes())
    assert [c for c in mapped_changes(in_place_only=True) if mine in c] == [
        f"{(store / 'values.bin').resolve()} was written in place (same size, modified since it was mapped)"]
    assert f"{(store / 'timestamps.bin').resolve()} was replaced by another file" in mapped_changes()
    del s


def test_no_checkpoint_is_saved_of_batches_read_from_a_store_written_in_place(tmp_path: Path) -> None:
    store = _store(tmp_path)
    cfg = _config(store, "checkpoint.enabled=true", "checkpoint.every=2")
    with pytest.raises(StoreChangedError) as info:
        Trainer(config=cfg, out=tmp_path / "run", callbacks=[WriteStoreAt(store, 3)]).fit()
    msg = str(info.value)
    assert msg.startswith(f"not saving step 4: {(store / 'values.bin').resolve()} was written in place")
    assert msg.endswith("run the same command to resume from checkpoint step 2")
    saved = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.startswith("step"))
    assert saved == ["step_00000002"], saved
    assert not (tmp_path / "run" / "summary.json").exists()


def test_a_run_without_checkpoints_says_the_store_changed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    clean = Trainer(config=_config(store), out=tmp_path / "clean").fit().summary
    assert clean["data_changed_in_place"] == []
    s = Trainer(config=_config(store), out=tmp_path / "run", callbacks=[WriteStoreAt(store, 3)]).fit().summary
    assert s["data_changed_in_place"] == [
        f"{(store / 'values.bin').resolve()} was written in place (same size, modified since it was mapped)"]


def test_an_earlier_trainer_of_the_same_store_does_not_stop_a_later_run(tmp_path: Path) -> None:
    """A trainer kept alive in the process (a notebook, an in-process sweep) still maps the store; after the store's
    files moved on, a later run that mapped them afresh was refused its checkpoints for the earlier run's maps."""
    store = _store(tmp_path)
    first = Trainer(config=_config(store), out=tmp_path / "a")
    first.fit()
    st = os.stat(store / "values.bin")  # a copy of the same bytes over it would do the same: a new mtime
    os.utime(store / "values.bin", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    later = Trainer(config=_config(store, "checkpoint.enabled=true", "checkpoint.every=2"), out=tmp_path / "b").fit()
    assert later.summary["data_changed_in_place"] == []
    assert first.data_changed_in_place() == [
        f"{(store / 'values.bin').resolve()} was written in place (same size, modified since it was mapped)"]
