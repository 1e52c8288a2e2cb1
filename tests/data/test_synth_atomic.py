"""`stride data synth` builds its tree in a temporary sibling folder and renames it into place with a completion
marker: --overwrite replaces only an earlier synth output, an interrupted synth leaves nothing at --out (and
ingest refuses its temporary folder), Ctrl-C in synth or ingest is one line and exit 130."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "foundation"))
from data_fixtures import write_parquet_dataset  # noqa: E402

from stride.cli.main import main  # noqa: E402
from stride.data import simulator  # noqa: E402
from stride.data.ingest import IngestError, ingest  # noqa: E402
from stride.data.simulator import MARKER, SynthError, synthesize  # noqa: E402
from stride.data.store import StoreWriter, open_store  # noqa: E402
from stride.files.owner import tagged_name  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _hidden(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


def test_overwrite_replaces_only_an_earlier_synth(tmp_path: Path) -> None:
    """The audit's case: a second synth with --overwrite kept the first one's partitions, and ingest mixed them."""
    out = tmp_path / "mix"
    synthesize(out, n_assets=2, n_days=2, freq="30min")
    assert json.loads((out / MARKER).read_text())["files"] == 4
    with pytest.raises(SynthError, match="holds an earlier `stride data synth` output .*--overwrite"):
        synthesize(out, n_assets=1, n_days=1, freq="30min", seed=7)
    synthesize(out, n_assets=1, n_days=1, freq="30min", seed=7, overwrite=True)
    st = open_store(ingest(out, tmp_path / "st"))
    assert [(r["symbol"], r["stop"] - r["start"]) for r in st.manifest["symbols"]] == [("S000", 13)]
    assert _hidden(tmp_path) == []
    # anything else is refused, with or without --overwrite, naming the folder and left as it was
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "keep.txt").write_text("x")
    for target, what in ((junk, "not empty and not a `stride data synth` output"), (tmp_path / "st", "a stride store")):
        before = sorted(p.name for p in target.rglob("*"))
        for overwrite in (False, True):
            with pytest.raises(SynthError, match=f"--out {target} is {what}.*remove it yourself"):
                synthesize(target, n_assets=1, n_days=1, freq="30min", overwrite=overwrite)
        assert sorted(p.name for p in target.rglob("*")) == before
    (tmp_path / "empty").mkdir()  # an empty folder is simply used
    synthesize(tmp_path / "empty", n_assets=1, n_days=1, freq="30min")
    assert (tmp_path / "empty" / MARKER).is_file()


def test_a_crash_or_ctrl_c_leaves_nothing_and_keeps_the_earlier_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "syn"
    synthesize(out, n_assets=2, n_days=1, freq="30min")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    real, calls = simulator.pq.write_table, []

    def stop_at_the_third(table: object, where: object) -> None:
        calls.append(where)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(table, where)

    monkeypatch.setattr(simulator.pq, "write_table", stop_at_the_third)
    args = ["data", "synth", "--out", str(out), "--assets", "4", "--days", "2", "--freq", "30min", "--overwrite"]
    assert main(args) == 130
    err = capsys.readouterr().err
    assert err.startswith("stride data synth: stopped (interrupted)") and err.count("\n") == 1
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before and _hidden(tmp_path) == []
    calls.clear()
    monkeypatch.setattr(simulator.pq, "write_table", lambda t, w: (_ for _ in ()).throw(OSError(28, "No space")))
    with pytest.raises(OSError):
        synthesize(tmp_path / "new", n_assets=2, n_days=1, freq="30min")
    assert not (tmp_path / "new").exists() and _hidden(tmp_path) == []


def test_a_killed_synth_is_refused_by_ingest_and_removed_by_the_next_synth(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / tagged_name("tmp", "synth-0badc0de-syn", pid=int(dead.stdout))  # what kill -9 leaves
    write_parquet_dataset(left, symbols=("S000",))
    with pytest.raises(IngestError, match="temporary folder of an unfinished `stride data synth`"):
        ingest(left, tmp_path / "st")
    synthesize(tmp_path / "syn", n_assets=1, n_days=1, freq="30min")
    assert not left.exists() and _hidden(tmp_path) == []


def test_ingest_notes_a_synth_tree_without_its_marker(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "syn"
    synthesize(out, n_assets=2, n_days=2, freq="30min")
    with caplog.at_level(logging.WARNING, logger="stride.data"):
        ingest(out, tmp_path / "a")
    assert not [r for r in caplog.records if MARKER in r.getMessage()]  # a finished synth: nothing to say
    next(out.glob("date=*/symbol=S001")).joinpath("part-0.parquet").unlink()
    with caplog.at_level(logging.WARNING, logger="stride.data"):
        ingest(out, tmp_path / "b")
    (line,) = [r.getMessage() for r in caplog.records if MARKER in r.getMessage()]
    assert "holds 3 data files" in line and "says 4" in line
    caplog.clear()
    (out / MARKER).unlink()  # an older stride's synth, perhaps interrupted
    with caplog.at_level(logging.WARNING, logger="stride.data"):
        ingest(out, tmp_path / "c")
    (line,) = [r.getMessage() for r in caplog.records if MARKER in r.getMessage()]
    assert "no _stride_synth.json" in line and "maybe interrupted" in line


def test_ctrl_c_in_ingest_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    write_parquet_dataset(tmp_path / "src")
    monkeypatch.setattr(StoreWriter, "append", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert main(["data", "ingest", str(tmp_path / "src"), "--out", str(tmp_path / "st")]) == 130
    err = capsys.readouterr().err
    assert err.startswith("stride data ingest: stopped (interrupted): nothing written") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_sigint_in_a_real_synth(tmp_path: Path) -> None:
    """Ctrl-C as a terminal sends it: one line, exit 130, no traceback, nothing at --out, no temporary folder."""
    out = tmp_path / "syn"
    p = subprocess.Popen([sys.executable, "-m", "stride", "data", "synth", "--out", str(out), "--assets", "16",
                          "--days", "400"], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not any(tmp_path.glob(".tmp-stride-*/date=*/symbol=*/part-0.parquet")) and time.monotonic() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err and err.count("\n") == 1 and "stopped (interrupted)" in err
    assert list(tmp_path.iterdir()) == []
