"""A stride data store is a folder kind: `stride train/bench/sweep --out STORE` is refused, nothing written.

Before (audit 7, #5): `stride train --out STORE` wrote config.toml, metrics.jsonl and summary.json beside the
store's manifest.json, and a later `stride data ingest ... --out STORE --overwrite` deleted that run without a word.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.files.folder_kind import FolderHoldsOther, refuse_others, what_it_holds

CONFIG = "\n".join([
    "[model]", 'name = "mlp"', 'size = "tiny"',
    "[data]", "n_assets = 4", "n_steps = 1024", "seq_len = 8", "horizons = [1, 5]",
    "[train]", "steps = 4", "batch_size = 32", "val_every = 4", "val_batches = 2", "threads = 1",
    "[metrics]", "progress = false", "flops = false", ""])


def snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A real store of 3 rows, made by `stride data ingest`."""
    root = tmp_path_factory.mktemp("store")
    csv = root / "a.csv"
    csv.write_text("timestamp,close\n2024-01-02T14:31:00,1.0\n2024-01-02T14:32:00,2.0\n2024-01-02T14:33:00,3.0\n")
    assert main(["data", "ingest", str(csv), "--out", str(root / "st")]) == 0
    return root / "st"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(CONFIG)
    return path


def test_a_store_is_a_folder_kind(store: Path, tmp_path: Path) -> None:
    import stride.data.store
    import stride.files.store_marker

    assert stride.data.store.is_store is stride.files.store_marker.is_store  # one definition, below stride.data
    assert [(h.kind, h.describe()) for h in what_it_holds(store)] == [
        ("store", "a stride data store (manifest.json)")]
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"format": "something-else"}))  # another tool's manifest
    assert what_it_holds(other) == []
    (other / "manifest.json").write_text("{not json")
    assert what_it_holds(other) == []


@pytest.mark.parametrize("command", ["train", "bench", "sweep"])
def test_out_on_a_store_is_refused_and_nothing_written(command: str, store: Path, config: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(store)
    argv = {"train": ["train", str(config), "--no-progress"],
            "bench": ["bench", "--workloads", "mlp_tiny", "--set", "train.steps=4", "--no-report"],
            "sweep": ["sweep", str(config), "--grid", "optim.lr=1e-3,2e-3", "--pack", "2"]}[command]
    rc = main([*argv, "--out", str(store)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"stride {command}: --out {store} holds a stride data store (manifest.json): writing ")
    assert "`stride data ingest --out` of that folder with --overwrite would delete what is written there" in err[0]
    assert snapshot(store) == before


def test_export_to_a_store_is_refused(store: Path) -> None:
    from stride.files.folder_kind import KINDS

    with pytest.raises(FolderHoldsOther, match="holds a stride data store"):
        refuse_others(store, "train", "--export-to", kinds=KINDS)


def test_a_link_to_a_store_is_a_store_to_writers_but_never_deleted_through(store: Path, tmp_path: Path) -> None:
    """`stride train --out LINK` refuses a symlink to a store as it refuses the store; `ingest --overwrite`'s check
    (stride.data.store.is_store) does not follow the link, so it never deletes through one."""
    from stride.data.store import is_store

    link = tmp_path / "link"
    link.symlink_to(store, target_is_directory=True)
    assert [h.kind for h in what_it_holds(link)] == ["store"]
    assert is_store(store) and not is_store(link)
