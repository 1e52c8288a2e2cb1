"""Issue 19, cases 2, 8 and the data half of 9: ingestion and stores under hostile or careless input.

Each refusal is one line naming the input, exit status 2, nothing outside the command's own output changed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from ckpt_helpers import dead_pid
from data_fixtures import bars, write_parquet_dataset
from fault_helpers import GEN, REPO, one_line_error, stride_main, tree_digest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stride.data.ingest import ingest
from stride.data.store import open_store
from stride.files.owner import tagged_name


def _ingest(*args: str):
    return stride_main("data", "ingest", *map(str, args))


# -- case 2: --overwrite deletes only a store --------------------------------------------------------------

def test_out_equal_to_the_source_is_refused_and_the_sources_survive(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_parquet_dataset(src)
    before = tree_digest(tmp_path)
    one_line_error(_ingest(src, "--out", src, "--overwrite"), str(src), "is the source")
    assert tree_digest(tmp_path) == before


def test_out_containing_or_inside_a_source_is_refused(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    write_parquet_dataset(outer / "src")
    before = tree_digest(tmp_path)
    one_line_error(_ingest(outer / "src", "--out", outer, "--overwrite"), "contains the source")
    one_line_error(_ingest(outer / "src", "--out", outer / "src" / "store"), "inside the source folder")
    assert tree_digest(tmp_path) == before


def test_overwrite_refuses_a_folder_that_is_not_a_store(tmp_path: Path) -> None:
    write_parquet_dataset(tmp_path / "src")
    other = tmp_path / "mydocs"
    other.mkdir()
    (other / "thesis.tex").write_text("years of work")
    (other / "manifest.json").write_text('{"format": "something-else"}')
    before = tree_digest(tmp_path)
    one_line_error(_ingest(tmp_path / "src", "--out", other, "--overwrite"), str(other), "not a stride store")
    assert tree_digest(tmp_path) == before


def test_overwrite_replaces_a_store(tmp_path: Path) -> None:
    write_parquet_dataset(tmp_path / "src")
    assert _ingest(tmp_path / "src", "--out", tmp_path / "st").code == 0
    res = _ingest(tmp_path / "src", "--out", tmp_path / "st", "--overwrite", "--columns", "close")
    assert res.code == 0, res.err
    assert open_store(tmp_path / "st").columns == ["close"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src", "st"]  # no temporary or old folder left


# -- case 8: out-of-range values are their own error, never filled --------------------------------------------

@pytest.mark.parametrize("policy", ["error", "zero", "ffill"])
def test_a_finite_value_beyond_float32_is_an_error_under_every_fill_policy(tmp_path: Path, policy: str) -> None:
    d = bars("AAA").to_pydict()
    d["f1"][17] = 1e300
    (tmp_path / "src").mkdir()
    pq.write_table(pa.table(d), tmp_path / "src" / "a.parquet")
    line = one_line_error(_ingest(tmp_path / "src", "--out", tmp_path / "st", "--fill-policy", policy),
                          "a.parquet", "'f1'", "1e+300", "row 17", "float32's range")
    assert " inf " not in line
    assert not (tmp_path / "st").exists()


def test_a_value_beyond_bfloat16_is_an_error_for_a_bf16_store(tmp_path: Path) -> None:
    d = bars("AAA").to_pydict()
    d["close"][3] = 3.399e38  # finite in float32, inf in bfloat16
    (tmp_path / "src").mkdir()
    pq.write_table(pa.table(d), tmp_path / "src" / "a.parquet")
    one_line_error(_ingest(tmp_path / "src", "--out", tmp_path / "st", "--dtype", "bfloat16"),
                   "'close'", "row 3", "bfloat16's range")
    assert _ingest(tmp_path / "src", "--out", tmp_path / "st32").code == 0  # float32 holds it


def _tamper(store: Path, **changes) -> None:
    m = json.loads((store / "manifest.json").read_text())
    for k, v in changes.items():
        m[k] = v(m) if callable(v) else v
    (store / "manifest.json").write_text(json.dumps(m))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    write_parquet_dataset(tmp_path / "src")
    return ingest(tmp_path / "src", tmp_path / "st")


def _runs_outside(m: dict) -> list:
    runs = [dict(r) for r in m["symbols"]]
    runs[-1]["stop"] += 1000  # past the last row
    return runs


def _runs_overlapping(m: dict) -> list:
    runs = [dict(r) for r in m["symbols"]]
    runs[1]["start"] -= 10
    return runs


@pytest.mark.parametrize("runs", [_runs_outside, _runs_overlapping])
def test_symbol_runs_outside_the_data_are_refused_by_open_verify_and_train(store: Path, runs) -> None:
    _tamper(store, symbols=runs)
    one_line_error(stride_main("data", "inspect", str(store), "--verify"), "symbol run", "tile")
    one_line_error(stride_main("data", "inspect", str(store)), "symbol run")


def test_verify_checks_each_run_against_the_timestamps(store: Path) -> None:
    m = json.loads((store / "manifest.json").read_text())
    runs = [dict(r) for r in m["symbols"]]
    runs[0]["stop"] -= 5  # runs still tile the rows, but symbol boundaries moved into the data
    runs[1]["start"] -= 5
    _tamper(store, symbols=runs)
    one_line_error(stride_main("data", "inspect", str(store), "--verify"), "differ from the manifest")


def test_verify_finds_nan_written_into_values(store: Path) -> None:
    vals = np.memmap(store / "values.bin", dtype=np.float32, mode="r+")
    vals[5] = np.nan
    vals.flush()
    del vals
    import hashlib

    sha = hashlib.sha256((store / "values.bin").read_bytes()).hexdigest()  # a manifest without sampled digests (older)
    _tamper(store, files=lambda m: {**m["files"], "values.bin": {"bytes": m["files"]["values.bin"]["bytes"],
                                                                 "sha256": sha}})
    one_line_error(stride_main("data", "inspect", str(store), "--verify"), "NaN or inf")


# -- case 9, data: one line instead of a traceback ---------------------------------------------------------

@pytest.mark.parametrize("text,words", [
    ("{not json", ("not valid JSON",)),
    ('{"format": "stride-store", "version": 1, "dtype": "float128", "columns": ["a"], "n_rows": 1}',
     ("dtype 'float128'",)),
    ('{"format": "stride-store", "version": 1, "dtype": "float32", "columns": ["a"], "n_rows": "many"}',
     ("n_rows",)),
    ('[1, 2, 3]', ("format",)),
    ("", ("not valid JSON",)),
])
def test_a_bad_store_manifest_is_one_line(store: Path, text: str, words: tuple[str, ...]) -> None:
    (store / "manifest.json").write_text(text)
    one_line_error(stride_main("data", "inspect", str(store)), "manifest.json", *words)


def test_a_data_file_linked_out_of_the_store_is_refused(store: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.bin"
    os.replace(store / "timestamps.bin", outside)
    os.symlink(outside, store / "timestamps.bin")
    one_line_error(stride_main("data", "inspect", str(store)), "outside the store")


def test_type_clash_across_files_is_one_line(tmp_path: Path) -> None:
    pq.write_table(bars("AAA"), (tmp_path / "src").mkdir() or tmp_path / "src" / "1.parquet")
    d = bars("BBB").to_pydict()
    d["f1"] = [f"x{i}" for i in range(len(d["f1"]))]
    pq.write_table(pa.table(d), tmp_path / "src" / "2.parquet")
    one_line_error(_ingest(tmp_path / "src", "--out", tmp_path / "st"), "2.parquet", "'f1'", "string", "numeric")
    assert not (tmp_path / "st").exists()


def test_a_gz_that_is_not_gzip_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "prices.csv.gz").write_text("timestamp,a\n1,2\n")
    one_line_error(_ingest(tmp_path / "prices.csv.gz", "--out", tmp_path / "st"), "prices.csv.gz", "not a gzip file")


@pytest.mark.parametrize("name", ["obj.npy", "obj.npz"])
def test_an_object_array_is_refused_and_never_unpickled(tmp_path: Path, name: str) -> None:
    canary = tmp_path / "CANARY"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"echo pwned > {canary}",))

    arr = np.array([Evil(), 1], dtype=object)
    np.savez(tmp_path / name, a=arr) if name.endswith("npz") else np.save(tmp_path / name, arr)
    one_line_error(_ingest(tmp_path / name, "--out", tmp_path / "st"), name, "Python objects")
    assert not canary.exists()


def test_a_file_deleted_mid_ingest_is_one_line(tmp_path: Path, monkeypatch) -> None:
    import stride.data.ingest as ing

    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(bars("AAA"), src / "1.parquet")
    pq.write_table(bars("BBB"), src / "2.parquet")
    real = ing.read_chunks

    def deleting(path: Path, time_col: str, time_format: str | None = None):
        for chunk in real(path, time_col, time_format):
            (src / "2.parquet").unlink(missing_ok=True)  # gone while the first file is being read
            yield chunk

    monkeypatch.setattr(ing, "read_chunks", deleting)
    one_line_error(_ingest(src, "--out", tmp_path / "st"), "2.parquet", "disappeared")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_a_store_or_column_missing_in_train_is_one_line(store: Path, tmp_path: Path) -> None:
    base = ["configs/quickstart.toml", "--no-progress", "--out", str(tmp_path / "run"), "--set", "data.source=store",
            "--set", "train.steps=1", "--set", "train.batch_size=4", "--set", "data.seq_len=8",
            "--set", "data.horizons=[1]"]
    res = stride_main("train", *base, "--set", f"data.store={tmp_path / 'nope'}")
    one_line_error(res, "`data.store`", "nope", "no such directory")
    res = stride_main("train", *base, "--set", f"data.store={store}", "--set", 'data.columns=["F1"]')
    one_line_error(res, "`data.columns`", "no column 'F1'", "did you mean 'f1'")


KILLER = textwrap.dedent("""
    import os, signal, sys
    import stride.data.store as store
    from stride.cli.main import main

    real = store.StoreWriter.append
    def killing_append(self, *args, **kwargs):
        real(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)  # a spool file is written; nothing is committed
    store.StoreWriter.append = killing_append
    raise SystemExit(main(sys.argv[1:]))
""")


def test_a_killed_ingest_leaves_a_folder_the_next_ingest_removes_and_nothing_else(tmp_path: Path) -> None:
    write_parquet_dataset(tmp_path / "src")
    work = tmp_path / "work"
    work.mkdir()
    (work / ".tmp-someone-else").mkdir()  # another tool's temporary folder: never touched
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    live = work / tagged_name("tmp", "store-0badc0de-st", pid=sleeper.pid)  # a running ingestion's
    live.mkdir()
    driver = tmp_path / "driver.py"
    driver.write_text(KILLER)
    try:
        r = subprocess.run([sys.executable, str(driver), "data", "ingest", str(tmp_path / "src"), "--out",
                            str(work / "st")], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
        (left,) = [p for p in work.iterdir() if p.name.startswith(".tmp-stride-") and p != live]
        assert left.is_dir()
        stale = work / tagged_name("tmp", "store-12345678-other", pid=dead_pid())
        stale.mkdir()
        res = _ingest(tmp_path / "src", "--out", work / "st")
        assert res.code == 0, res.err
        assert sorted(p.name for p in work.iterdir()) == sorted([".tmp-someone-else", live.name, "st"])
    finally:
        sleeper.kill()
        sleeper.wait()


# -- generated text inputs ------------------------------------------------------------------------------------

cell = st.one_of(st.integers(-(2**53), 2**53).map(str), st.floats().map(repr), st.just(""),
                 st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters='\r\n,"'), max_size=6),
                 st.sampled_from(["1e300", "-1e39", "3.4e38", "nan", "inf", "NULL", "1,5"]))
SETTINGS = {**GEN, "suppress_health_check": [HealthCheck.function_scoped_fixture]}


@settings(**SETTINGS, max_examples=80)
@given(rows=st.lists(st.tuples(st.integers(0, 40), st.sampled_from(["A", "B"]), cell, cell), max_size=12),
       policy=st.sampled_from(["error", "zero", "ffill"]))
def test_generated_csv_sources_ingest_exactly_or_fail_in_one_line(tmp_path: Path, rows, policy) -> None:
    work = tmp_path / f"w{len(list(tmp_path.iterdir()))}"
    work.mkdir()
    src = work / "in.csv"
    src.write_text("timestamp,symbol,a,b\n" + "".join(f"{t},{s},{a},{b}\n" for t, s, a, b in rows))
    before = tree_digest(work)
    res = _ingest(src, "--out", work / "st", "--fill-policy", policy)
    if res.code != 0:
        one_line_error(res, codes=(2,))
        assert tree_digest(work) == before  # nothing left behind
        return
    st_ = open_store(work / "st", verify=True)  # a store that was written checks out in full
    got = st_.values.numpy()
    assert np.isfinite(got).all()
    ordered = sorted(rows, key=lambda r: r[1])  # the store: symbol by symbol, file order within (stable sort)
    for k, (_, _, *cells) in enumerate(ordered):
        for j, c in enumerate(cells):
            try:
                x = float(c)
            except ValueError:
                continue  # an empty cell (missing): filled by the policy
            if np.isfinite(x):  # every finite source value is stored as float32 rounds it: nothing replaced
                assert got[k, j] == np.float32(x), (c, got[k, j], policy)


@settings(**SETTINGS, max_examples=80)
@given(key=st.sampled_from(["format", "version", "dtype", "columns", "n_rows", "symbols", "files", "time_range"]),
       value=st.recursive(st.none() | st.booleans() | st.integers(-5, 10**12) | st.text(max_size=6),
                          lambda i: st.lists(i, max_size=3) | st.dictionaries(st.text(max_size=6), i, max_size=3),
                          max_leaves=8))
def test_generated_store_manifests_open_or_fail_in_one_line(tmp_path: Path, key, value) -> None:
    work = tmp_path / f"w{len(list(tmp_path.iterdir()))}"
    src = work / "src"
    if not src.exists():
        (src).mkdir(parents=True)
        pq.write_table(bars("AAA", per_day=20), src / "a.parquet")
    store_path = ingest(src, work / "st")
    m = json.loads((store_path / "manifest.json").read_text())
    m[key] = value
    (store_path / "manifest.json").write_text(json.dumps(m))
    res = stride_main("data", "inspect", str(store_path), "--verify", "--json")
    if res.code != 0:
        one_line_error(res, codes=(2,))


@pytest.mark.parametrize("damage", ["truncate", "link"])
def test_a_derived_cache_of_the_wrong_size_or_a_link_is_rebuilt(store: Path, tmp_path: Path, damage: str) -> None:
    from stride.config import load_config
    from stride.data.build import build_data

    cfg = load_config(overrides=['data.source="store"', f'data.store="{store}"', 'data.normalize="expanding"',
                                 "data.seq_len=8", "data.horizons=[1]"]).data
    first = build_data(cfg, 8).train.source.gather(torch.arange(8))[0].clone()
    (cache,) = (store / "derived").glob("*.f32")  # beside the probe's figures and the cache's record (.f32.json)
    good = cache.read_bytes()
    outside = tmp_path / "outside.f32"
    outside.write_bytes(good[:-64])
    cache.unlink()
    if damage == "truncate":
        cache.write_bytes(good[:-64])
    else:
        os.symlink(outside, cache)
    again = build_data(cfg, 8).train.source.gather(torch.arange(8))[0]
    assert torch.equal(first, again) and cache.read_bytes() == good and not cache.is_symlink()
    assert outside.read_bytes() == good[:-64]  # the link's target was not written through


def test_a_source_name_with_a_newline_is_still_one_line(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    d = bars("AAA").to_pydict()
    d["f1"][3] = float("nan")
    pq.write_table(pa.table(d), src / "bad\nname.parquet")
    one_line_error(_ingest(src, "--out", tmp_path / "st"), "bad\\nname.parquet", "NaN")
