"""`stride data ingest` that loses the race for its --out (another ingest made the folder meanwhile) says so
(audit 16, L5), not the rename's errno text ("Directory not empty")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stride.data.store import StoreError, StoreWriter, open_store


def _store(out: Path, rows: int = 64) -> Path:
    w = StoreWriter(out, ["c0"])
    w.append("A", np.arange(rows, dtype=np.int64) * 60_000_000_000, np.ones((rows, 1), np.float32))
    return w.commit()


def test_an_ingest_that_loses_the_race_for_its_out_says_so(tmp_path: Path) -> None:
    out = tmp_path / "store"
    slow = StoreWriter(out, ["c0"])  # started while `out` did not exist
    slow.append("A", np.arange(8, dtype=np.int64), np.ones((8, 1), np.float32))
    _store(out)  # another ingest finished first
    with pytest.raises(StoreError, match=rf"^{out}: another ingest \(or another process\) wrote it while this one "
                                         r"ran \(it was not there at the start\); this store was not written"):
        slow.commit()
    assert not slow.tmp.exists() and open_store(out).n_rows == 64
