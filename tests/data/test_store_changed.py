"""A store whose files changed after commit is refused at open (training included), naming the file and
`stride data inspect STORE --verify`; a copy of a store (new mtimes, same bytes) still opens.

Before: training never re-hashed a store (only `stride data inspect --verify` did), so a values.bin edited
after ingestion trained silently.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from data_fixtures import write_parquet_dataset

from stride.cli.main import main
from stride.data.ingest import ingest
from stride.data.store import SAMPLE_BLOCK, SAMPLE_BLOCKS, StoreError, StoreWriter, open_store


def test_training_refuses_a_store_edited_after_commit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_parquet_dataset(tmp_path / "src")
    store = ingest(tmp_path / "src", tmp_path / "store")
    n, c = open_store(store).values.shape
    vals = np.memmap(store / "values.bin", dtype=np.float32, mode="r+", shape=(n, c))
    vals[n // 2, 1] += 1.0  # a finite value, changed: no NaN check can see it
    vals.flush()
    del vals
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'[model]\nname = "mlp"\n[data]\nsource = "store"\nstore = "{store}"\nseq_len = 4\nhorizons = [1]\n'
                   '[train]\nsteps = 2\nbatch_size = 4\nval_every = 0\n')
    assert main(["train", str(cfg), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"{store / 'values.bin'}: changed after the store was committed" in err
    assert f"stride data inspect {store} --verify" in err
    assert not (tmp_path / "run" / "summary.json").exists()


def _big_store(tmp_path: Path) -> tuple[Path, int]:
    """A store whose values.bin (2 MiB) is larger than the blocks hashed whole: sampled blocks."""
    rows, cols = 1 << 16, 8
    w = StoreWriter(tmp_path / "big", [f"c{i}" for i in range(cols)])
    w.append("AAA", np.arange(rows, dtype=np.int64) + 1, np.random.default_rng(0).standard_normal((rows, cols)))
    path = w.commit()
    assert rows * cols * 4 > SAMPLE_BLOCK * SAMPLE_BLOCKS
    return path, rows * cols * 4


def test_sampled_blocks_catch_a_change_inside_them_and_name_its_rows(tmp_path: Path) -> None:
    store, size = _big_store(tmp_path)
    offsets = json.loads((store / "manifest.json").read_text())["files"]["values.bin"]["sample"]["offsets"]
    assert len(offsets) == SAMPLE_BLOCKS and offsets[0] == 0 and offsets[-1] == size - SAMPLE_BLOCK
    copy = tmp_path / "copy"
    shutil.copytree(store, copy, copy_function=shutil.copyfile)  # new mtimes, same bytes: still the same store
    open_store(copy)
    at = offsets[20] + 100  # a byte inside the 21st sampled block
    with open(store / "values.bin", "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))
    with pytest.raises(StoreError, match=rf"values.bin: changed after the store was committed \(bytes {offsets[20]}\.\."
                       rf"{offsets[20] + SAMPLE_BLOCK - 1}, rows {offsets[20] // 32}\.\..*--verify"):
        open_store(store)


def test_a_same_size_timestamps_file_from_elsewhere_is_refused(tmp_path: Path) -> None:
    write_parquet_dataset(tmp_path / "src")
    a = ingest(tmp_path / "src", tmp_path / "a")
    ts = np.fromfile(a / "timestamps.bin", dtype=np.int64)
    (a / "timestamps.bin").write_bytes((ts + 1).tobytes())  # shifted by a nanosecond, the same size
    with pytest.raises(StoreError, match="timestamps.bin: changed after the store was committed"):
        open_store(a)


@pytest.mark.parametrize("sample", [{"block_bytes": 1 << 40, "offsets": [0], "blake2b_64": ["00"]},
                                    {"block_bytes": 16, "offsets": [0, 16], "blake2b_64": ["00"]},
                                    {"block_bytes": 16, "offsets": [-1], "blake2b_64": ["00"]}, "x"])
def test_a_bad_sample_entry_is_a_manifest_error(tmp_path: Path, sample: object) -> None:
    write_parquet_dataset(tmp_path / "src")
    store = ingest(tmp_path / "src", tmp_path / "st")
    m = json.loads((store / "manifest.json").read_text())
    m["files"]["values.bin"]["sample"] = sample
    (store / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(StoreError, match=r"manifest.json: files.values.bin.sample must give"):
        open_store(store)
