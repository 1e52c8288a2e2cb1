"""Ingestion: symbols from hive `symbol=X` folders, file-name symbols that would merge two folders' files refused,
symbols with control characters refused; notes for integers float32 rounds and for an unused --time-format; an
empty --out used as it is; a missing store file said as such; `inspect | head` without "Broken pipe"."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from data_fixtures import bars, write_parquet_dataset  # noqa: E402

from stride.cli.main import main  # noqa: E402
from stride.data.ingest import IngestError, ingest  # noqa: E402
from stride.data.store import StoreError, open_store  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _no_symbol(t: pa.Table) -> pa.Table:
    return t.drop_columns(["symbol"])


def _symbols(store: Path) -> dict[str, int]:
    return {r["symbol"]: r["stop"] - r["start"] for r in open_store(store).manifest["symbols"]}


def test_hive_symbol_folders_name_the_symbols(tmp_path: Path) -> None:
    """The audit's case: two contracts as `symbol=ESH4/part-0.parquet`, `symbol=ESM4/part-0.parquet` (they were one
    symbol `part-0`), with and without overlapping times; `date=` folders around them change nothing."""
    for name, days in (("apart", (0, 1)), ("overlap", (0, 0))):
        for sym, k in (("ESH4", days[0]), ("ESM%204", days[1])):  # URL-encoded, as pyarrow writes a space
            part = tmp_path / name / f"date={k}" / f"symbol={sym}"
            part.mkdir(parents=True)
            pq.write_table(_no_symbol(bars("x", n_days=1, seed=k)), part / "part-0.parquet")
        assert _symbols(ingest(tmp_path / name, tmp_path / f"st-{name}")) == {"ESH4": 50, "ESM 4": 50}


def test_one_name_in_two_folders_is_refused_naming_both(tmp_path: Path) -> None:
    for d in ("a", "b"):
        (tmp_path / "src" / d).mkdir(parents=True)
        pq.write_table(_no_symbol(bars("x", n_days=1)), tmp_path / "src" / d / "part-0.parquet")
    with pytest.raises(IngestError, match=r"a/part-0.parquet and .*b/part-0.parquet would both be symbol 'part-0'"):
        ingest(tmp_path / "src", tmp_path / "st")
    assert not (tmp_path / "st").exists()
    # a symbol column says which rows are which: the same file names are fine then
    for d, sym in (("a", "AAA"), ("b", "BBB")):
        pq.write_table(bars(sym, n_days=1), tmp_path / "src" / d / "part-0.parquet")
    assert _symbols(ingest(tmp_path / "src", tmp_path / "st")) == {"AAA": 50, "BBB": 50}
    # one folder, two files of one name stem (a series split in two files): one symbol, as before
    one = tmp_path / "one"
    one.mkdir()
    t = _no_symbol(bars("x", n_days=2))
    pq.write_table(t.slice(0, 50), one / "AAA.1.parquet")
    pq.write_table(t.slice(50), one / "AAA.2.parquet")
    assert _symbols(ingest(one, tmp_path / "st1")) == {"AAA": 100}
    # one file a day, `date=.../AAA.parquet`: folders that differ only in a hive partition are one symbol's (the
    # session's review: refused by the first version of the check above, ingested as AAA before it)
    days = tmp_path / "days"
    for k, (lo, hi) in enumerate(((0, 50), (50, 100))):
        (days / f"date=2024-01-0{k + 2}").mkdir(parents=True)
        pq.write_table(t.slice(lo, hi - lo), days / f"date=2024-01-0{k + 2}" / "AAA.parquet")
    assert _symbols(ingest(days, tmp_path / "st2")) == {"AAA": 100}
    # ... but other partitions may name instruments: `contract=ESH4/data.parquet`, `contract=ESM4/data.parquet`
    # (apart in time, as futures contracts are) were merged into one symbol `data` by that version
    apart = tmp_path / "contracts"
    for k, (lo, hi) in enumerate(((0, 50), (50, 100))):
        (apart / f"contract=ES{'HM'[k]}4").mkdir(parents=True)
        pq.write_table(t.slice(lo, hi - lo), apart / f"contract=ES{'HM'[k]}4" / "data.parquet")
    with pytest.raises(IngestError, match=r"would both be symbol 'data'"):
        ingest(apart, tmp_path / "st3")


@pytest.mark.parametrize("bad", ["a\nb", "x\ty", "z\x00", "p\u2028q"])
def test_a_symbol_with_a_control_character_is_refused(tmp_path: Path, bad: str) -> None:
    t = bars("AAA", n_days=1).to_pydict()
    t["symbol"][7:] = [bad] * (len(t["symbol"]) - 7)
    pq.write_table(pa.table(t), tmp_path / "a.parquet")
    with pytest.raises(IngestError, match=r"a.parquet: symbol .* at row 7 .*control character"):
        ingest(tmp_path / "a.parquet", tmp_path / "st")


def test_integers_float32_cannot_hold_are_noted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    t = bars("AAA", n_days=1)
    vol = np.arange(len(t), dtype=np.int64) * 1000
    vol[[3, 9]] = [2**53 + 1, 16_777_217]
    vol[10] = 2**24 + 2  # above 2^24 but a float32 (even): unchanged, not counted
    pq.write_table(t.append_column("volume", pa.array(vol)), tmp_path / "a.parquet")
    with caplog.at_level(logging.WARNING, logger="stride.data"):
        st = open_store(ingest(tmp_path / "a.parquet", tmp_path / "st"))
    (line,) = [r.getMessage() for r in caplog.records if "2^24" in r.getMessage()]
    assert "column 'volume': 2 values" in line and f"first {2**53 + 1} -> {2**53}" in line and "row 3" in line
    assert st.values[9, st.column("volume")].item() == 16_777_216.0
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="stride.data"):
        ingest(tmp_path / "a.parquet", tmp_path / "st2", columns=["close"])  # not among the columns: no note
    assert not [r for r in caplog.records if "2^24" in r.getMessage()]


def test_time_format_is_applied_to_csv_or_said_unused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """pyarrow infers ISO-looking CSV dates itself: the format was silently ignored ('%Q' ran, '%Y-%d-%m' read as
    ISO). Now it parses the text; where the column is no text (Parquet timestamps), a note says it was unused."""
    csv = tmp_path / "a.csv"
    csv.write_text("timestamp,close\n2024-02-01,1.0\n2024-03-01,2.0\n")
    with pytest.raises(IngestError, match=r"does not parse with --time-format '%Q'"):
        ingest(csv, tmp_path / "bad", time_format="%Q")
    st = open_store(ingest(csv, tmp_path / "st", time_format="%Y-%d-%m"))  # day before month: 2 and 3 January
    assert [t[:10] for t in st.manifest["time_range"]] == ["2024-01-02", "2024-01-03"]
    pq.write_table(bars("AAA", n_days=1), tmp_path / "a.parquet")
    with caplog.at_level(logging.WARNING, logger="stride.data"):
        ingest(tmp_path / "a.parquet", tmp_path / "st2", time_format="%Q")
    (line,) = [r.getMessage() for r in caplog.records if "--time-format" in r.getMessage()]
    assert "'%Q' was not used" in line and "timestamp[ns]" in line


def test_an_empty_out_folder_is_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_parquet_dataset(tmp_path / "src")
    (tmp_path / "e").mkdir()
    assert main(["data", "ingest", str(tmp_path / "src"), "--out", str(tmp_path / "e")]) == 0
    assert open_store(tmp_path / "e").n_rows == 200
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "keep.txt").write_text("x")
    for extra in ([], ["--overwrite"]):  # one message, with or without --overwrite (they sent users to each other)
        assert main(["data", "ingest", str(tmp_path / "src"), "--out", str(tmp_path / "junk"), *extra]) == 2
        err = capsys.readouterr().err
        assert "is not a stride store" in err and "new or empty folder" in err and "pass --overwrite" not in err


def test_a_missing_store_file_is_said_missing(tmp_path: Path) -> None:
    write_parquet_dataset(tmp_path / "src")
    st = ingest(tmp_path / "src", tmp_path / "st")
    (st / "timestamps.bin").unlink()
    with pytest.raises(StoreError, match=r"timestamps.bin: missing \(the manifest expects 1600 bytes") as e:
        open_store(st)
    assert "-1 bytes" not in str(e.value)  # (the tmp path itself may hold "-1": pytest-1x)


def test_inspect_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    """`stride data inspect --json | head -c 100`: no "Broken pipe" line, the status a SIGPIPE death reads as."""
    write_parquet_dataset(tmp_path / "src")
    st = ingest(tmp_path / "src", tmp_path / "st")
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first byte
    try:
        p = subprocess.run([sys.executable, "-m", "stride", "data", "inspect", str(st), "--json"], stdout=w,
                           stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    finally:
        os.close(w)
    assert p.stderr == "" and p.returncode == 141


def test_out_dot_is_filled_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--out .` (an empty current folder, or a mount point) cannot be renamed over: synth and ingest failed
    after all their work ("is no longer empty", "Device or resource busy"). An empty folder is filled in place."""
    (tmp_path / "syn").mkdir()
    monkeypatch.chdir(tmp_path / "syn")
    assert main(["data", "synth", "--out", ".", "--assets", "2", "--days", "2", "--freq", "30min"]) == 0
    assert (tmp_path / "syn" / "_stride_synth.json").is_file()
    (tmp_path / "st").mkdir()
    monkeypatch.chdir(tmp_path / "st")
    assert main(["data", "ingest", str(tmp_path / "syn"), "--out", "."]) == 0
    assert open_store(tmp_path / "st").n_rows == 52
    assert sorted(p.name for p in tmp_path.iterdir()) == ["st", "syn"]  # no temporary left beside them


def test_an_empty_mount_point_is_filled_on_its_own_filesystem(tmp_path: Path) -> None:
    """An empty mount point as --out: a temporary folder beside it sat on another filesystem, and filling the mount
    failed after all the work ("Invalid cross-device link"). The temporary is built inside the empty folder now."""
    mounts = [tmp_path / "syn", tmp_path / "st"]
    try:
        for m in mounts:
            m.mkdir()
            if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(m)], capture_output=True).returncode:
                pytest.skip("mounting a tmpfs needs privileges this host does not give")
        assert main(["data", "synth", "--out", str(mounts[0]), "--assets", "2", "--days", "2", "--freq", "30min"]) == 0
        assert main(["data", "ingest", str(mounts[0]), "--out", str(mounts[1])]) == 0
        assert open_store(mounts[1]).n_rows == 52
        assert not [p for m in mounts for p in m.iterdir() if p.name.startswith(".")]  # no temporary left
    finally:
        for m in mounts:
            subprocess.run(["umount", str(m)], capture_output=True)


@pytest.mark.parametrize("bad", ["a\x1b[31mb", "x\ny", "p\u2028q"])
def test_a_column_name_with_a_control_character_is_refused(tmp_path: Path, bad: str) -> None:
    """As a symbol's (audit 14): column names are printed by `stride data inspect` and in errors."""
    pq.write_table(bars("AAA", n_days=1).rename_columns(["timestamp", "symbol", bad, "f1", "f2"]),
                   tmp_path / "a.parquet")
    with pytest.raises(IngestError, match=r"a.parquet: column name .* holds the control character"):
        ingest(tmp_path / "a.parquet", tmp_path / "st")


def test_inspect_shows_names_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Symbols, column names and the store's path are text (audit 14): `[/y]` ended inspect with a MarkupError
    traceback, and an ESC in a column name (a store not written by ingest) reached the terminal raw."""
    from stride.data.store import StoreWriter

    st = tmp_path / "st[/p]"
    w = StoreWriter(st, ["c[/b]", "e\x1b[2J"])
    w.append("x[/y]", np.arange(3, dtype=np.int64), np.ones((3, 2), np.float32))
    w.commit()
    assert main(["data", "inspect", str(st)]) == 0
    out = capsys.readouterr().out
    assert "x[/y]" in out and "st[/p]" in out and "c[/b], e\\x1b[2J" in out and "\x1b" not in out
