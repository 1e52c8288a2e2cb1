"""Outside audit of the sinks, D9: the manifest's recorded shapes are checked against n_rows and columns."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from stride.data.store import StoreError, StoreWriter, open_store


def _store(tmp_path: Path) -> Path:
    w = StoreWriter(tmp_path / "st", [f"c{i}" for i in range(11)])
    w.append("AAA", np.arange(468, dtype=np.int64) + 1, np.random.default_rng(0).standard_normal((468, 11)))
    return w.commit()


def test_an_edited_values_shape_is_refused_naming_the_field(tmp_path: Path) -> None:
    store = _store(tmp_path)
    m = json.loads((store / "manifest.json").read_text())
    assert m["files"]["values.bin"]["shape"] == [468, 11]
    m["files"]["values.bin"]["shape"] = [234, 22]  # the same bytes, another shape
    (store / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(StoreError) as err:
        open_store(store, verify=True)
    assert str(err.value) == (f"{store / 'manifest.json'}: files.values.bin.shape [234, 22] does not match n_rows 468 "
                              "x 11 columns (the manifest was edited; re-ingest the store to repair it)")


def test_an_edited_column_list_names_the_manifest_not_values_bin(tmp_path: Path) -> None:
    store = _store(tmp_path)
    m = json.loads((store / "manifest.json").read_text())
    m["columns"] = m["columns"][:10]
    (store / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(StoreError, match=r"manifest.json: files.values.bin.shape \[468, 11\] does not match n_rows "
                                         r"468 x 10 columns"):
        open_store(store)
