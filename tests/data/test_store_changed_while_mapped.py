"""A store file truncated in place while a process maps it (audit 16, M3): the process dies of SIGBUS, which no
Python code survives, but the `stride` command names the file that changed in one line (a watcher process reads
the registry of mapped files, stride.data.mapped_files.note_faults)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from stride.data.store import StoreWriter, open_store

ROOT = Path(__file__).resolve().parents[2]


def _store(out: Path, rows: int = 4096, cols: int = 8) -> Path:
    w = StoreWriter(out, [f"c{i}" for i in range(cols)])
    w.append("A", np.arange(rows, dtype=np.int64) * 60_000_000_000, np.ones((rows, cols), np.float32))
    return w.commit()


# the `stride` command (main() with no argv: the program), whose `data inspect` opens the store; the store's file
# is cut short right after it was mapped, and the last row read (the process's own `truncate`, as another's would)
VICTIM = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from stride.cli import main as cli
    from stride.data import store as st

    real = st.open_store
    def open_then_cut(path, verify=False):
        s = real(path, verify)
        os.truncate(Path(path) / "values.bin", 4096)
        float(s.values[-1].sum())  # a page past the new end: SIGBUS
        return s
    st.open_store = open_then_cut
    sys.argv = ["stride", "data", "inspect", sys.argv[1]]
    sys.exit(cli.main())
""")


def test_a_store_truncated_while_mapped_is_named_when_the_process_dies(tmp_path: Path) -> None:
    store = _store(tmp_path / "store")
    size = (store / "values.bin").stat().st_size
    p = subprocess.run([sys.executable, "-c", VICTIM, str(store)], capture_output=True, text=True, cwd=ROOT,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == -signal.SIGBUS, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0] == (f"stride data: {(store / 'values.bin').resolve()} was truncated from {size} to 4096 bytes "
                        "while it was mapped, and reading it ended the process with SIGBUS: a store must not be "
                        "modified in place (stride data ingest writes a new one; --overwrite replaces it whole)")


def test_mapped_changes_names_a_file_changed_in_place(tmp_path: Path) -> None:
    """For a caller that checks between steps: what changed, before a read past the end kills the process."""
    from stride.data.mapped_files import mapped_changes

    store = _store(tmp_path / "store")
    s = open_store(store)
    mine = str(store.resolve())  # stores other tests of this process map are not this test's

    assert [c for c in mapped_changes() if mine in c] == []
    with open(store / "timestamps.bin", "r+b") as f:
        f.truncate(8)
    assert [c for c in mapped_changes() if mine in c] == [
        f"{(store / 'timestamps.bin').resolve()} was truncated from {4096 * 8} to 8 bytes"]
    del s
