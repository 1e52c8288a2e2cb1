"""Store round trips from every input format, manifest contents, atomic commit, checksums, bf16."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.feather as feather
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from data_fixtures import bars, write_parquet_dataset  # noqa: E402

from stride.data.ingest import IngestError, ingest  # noqa: E402
from stride.data.store import StoreError, open_store  # noqa: E402


def _expected(tables: dict[str, pa.Table]) -> np.ndarray:
    return np.concatenate([np.stack([tables[s][c].to_numpy() for c in ("close", "f1", "f2")], 1)
                           for s in sorted(tables)])


def test_parquet_partitioned_round_trip_and_manifest(tmp_path: Path) -> None:
    tables = write_parquet_dataset(tmp_path / "src")
    store = open_store(ingest(tmp_path / "src", tmp_path / "st"), verify=True)
    m = store.manifest
    assert m["columns"] == ["close", "f1", "f2"] and m["n_rows"] == 200 and m["dtype"] == "float32"
    assert [(r["symbol"], r["start"], r["stop"]) for r in m["symbols"]] == [("AAA", 0, 100), ("BBB", 100, 200)]
    ref = _expected(tables)
    np.testing.assert_array_equal(store.values.numpy(), ref.astype(np.float32))
    ts = tables["AAA"]["timestamp"].to_numpy().astype(np.int64)
    assert m["time_range_ns"] == [int(ts[0]), int(ts[-1])]
    np.testing.assert_array_equal(store.timestamps[:100], ts)
    for name in ("values.bin", "timestamps.bin"):
        assert m["files"][name]["sha256"] == hashlib.sha256((tmp_path / "st" / name).read_bytes()).hexdigest()


@pytest.mark.parametrize("fmt", ["arrow", "csv", "npz"])
def test_other_formats_give_the_same_store(tmp_path: Path, fmt: str) -> None:
    t = pa.concat_tables([bars("AAA", seed=0), bars("BBB", seed=1)])
    src = tmp_path / f"in.{fmt}"
    if fmt == "arrow":
        feather.write_feather(t, src)
    elif fmt == "csv":
        pcsv.write_csv(t, src)
    else:
        cols = {c: t[c].to_numpy() for c in ("close", "f1", "f2")}
        cols["timestamp"] = t["timestamp"].to_numpy()  # datetime64[ns]
        cols["symbol"] = np.asarray(t["symbol"].to_pylist(), dtype=str)
        np.savez(src, **cols)
    got = open_store(ingest(src, tmp_path / "st"))
    want = _expected({"AAA": bars("AAA", seed=0), "BBB": bars("BBB", seed=1)})
    np.testing.assert_allclose(got.values.numpy(), want, rtol=1e-6)
    assert [r["symbol"] for r in got.manifest["symbols"]] == ["AAA", "BBB"]


def test_npy_matrix_gets_row_number_timestamps(tmp_path: Path) -> None:
    a = np.arange(30, dtype=np.float64).reshape(10, 3)
    np.save(tmp_path / "m.npy", a)
    st = open_store(ingest(tmp_path / "m.npy", tmp_path / "st"))
    assert st.columns == ["c0", "c1", "c2"]
    np.testing.assert_array_equal(st.values.numpy(), a)
    np.testing.assert_array_equal(st.timestamps, np.arange(10))


def test_interrupted_ingestion_leaves_nothing_valid(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_parquet_dataset(src)
    bad = bars("ZZZ").to_pydict()
    bad["f1"][7] = float("nan")
    import pyarrow.parquet as pq

    (src / "zz").mkdir()
    pq.write_table(pa.table(bad), src / "zz" / "late.parquet")  # sorted after the good files
    with pytest.raises(IngestError):
        ingest(src, tmp_path / "st")
    assert not (tmp_path / "st").exists()
    assert not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())


def test_half_written_directory_is_refused(tmp_path: Path) -> None:
    write_parquet_dataset(tmp_path / "src")
    ingest(tmp_path / "src", tmp_path / "st")
    half = tmp_path / "half"
    half.mkdir()
    (half / "values.bin").write_bytes((tmp_path / "st" / "values.bin").read_bytes())
    with pytest.raises(StoreError, match="no manifest.json"):
        open_store(half)
    # A store whose data file was cut short does not open, nor one whose bytes changed (its sampled blocks);
    # without sampled digests in the manifest (a store committed before them), the change fails verify.
    data = (tmp_path / "st" / "values.bin").read_bytes()
    (tmp_path / "st" / "values.bin").write_bytes(data[:-4])
    with pytest.raises(StoreError, match="bytes on disk.*--verify"):
        open_store(tmp_path / "st")
    (tmp_path / "st" / "values.bin").write_bytes(bytes([data[0] ^ 1]) + data[1:])
    with pytest.raises(StoreError, match="values.bin: changed after the store was committed.*--verify"):
        open_store(tmp_path / "st")
    m = json.loads((tmp_path / "st" / "manifest.json").read_text())
    for info in m["files"].values():
        del info["sample"]
    (tmp_path / "st" / "manifest.json").write_text(json.dumps(m))
    open_store(tmp_path / "st")
    with pytest.raises(StoreError, match="sha256"):
        open_store(tmp_path / "st", verify=True)


def test_existing_store_is_not_overwritten_unless_asked(tmp_path: Path) -> None:
    write_parquet_dataset(tmp_path / "src")
    ingest(tmp_path / "src", tmp_path / "st")
    with pytest.raises(StoreError, match="already exists"):
        ingest(tmp_path / "src", tmp_path / "st")
    (tmp_path / "st" / "derived").mkdir()  # its caches go with it
    ingest(tmp_path / "src", tmp_path / "st", columns=["close"], overwrite=True)
    assert json.loads((tmp_path / "st" / "manifest.json").read_text())["columns"] == ["close"]


def test_overwrite_keeps_what_else_is_in_a_store_folder(tmp_path: Path) -> None:
    """Audit 7: a run trained into a store folder (`stride train --out STORE`) was deleted by the next
    `ingest --overwrite`, without a word. The store is replaced only when the folder holds nothing else."""
    write_parquet_dataset(tmp_path / "src")
    ingest(tmp_path / "src", tmp_path / "st")
    (tmp_path / "st" / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "st" / "summary.json").write_text("{}")
    with pytest.raises(StoreError, match=r"also holds metrics.jsonl, summary.json: --overwrite replaces a store"):
        ingest(tmp_path / "src", tmp_path / "st", columns=["close"], overwrite=True)
    assert (tmp_path / "st" / "metrics.jsonl").is_file()
    assert json.loads((tmp_path / "st" / "manifest.json").read_text())["columns"] != ["close"]


def test_bf16_store_rounds_to_nearest(tmp_path: Path) -> None:
    tables = write_parquet_dataset(tmp_path / "src")
    st = open_store(ingest(tmp_path / "src", tmp_path / "st", dtype="bfloat16"))
    assert st.values.dtype == torch.bfloat16
    ref = _expected(tables)
    np.testing.assert_array_equal(st.values.float().numpy(), torch.from_numpy(ref).to(torch.bfloat16).float().numpy())
    assert np.max(np.abs(st.values.float().numpy() - ref) / np.abs(ref)) <= 2**-8


def test_ctrl_c_in_the_clean_up_after_the_commit_says_the_store_was_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The session's review: Ctrl-C while ingest --overwrite removed the earlier store (after the new one was in
    place) said "nothing written ... the earlier store there is kept", which was false."""
    import stride.data.store as store_mod
    from stride.cli.main import main

    write_parquet_dataset(tmp_path / "src")
    ingest(tmp_path / "src", tmp_path / "st")

    def cut(path, *a, **k):  # noqa: ANN001, ANN002, ANN003
        raise KeyboardInterrupt

    monkeypatch.setattr(store_mod.shutil, "rmtree", cut)
    assert main(["data", "ingest", str(tmp_path / "src"), "--out", str(tmp_path / "st"), "--columns", "close",
                 "--overwrite"]) == 130
    err = capsys.readouterr().err
    assert "was written whole" in err and "nothing written" not in err
    assert json.loads((tmp_path / "st" / "manifest.json").read_text())["columns"] == ["close"]
