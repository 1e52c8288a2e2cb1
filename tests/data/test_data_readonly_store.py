"""A store that cannot be written (a shared or mounted dataset) trains: its derived feature caches (a column
subset, `expanding`, `rolling`, bf16 batches) go to the user's cache folder, keyed by the data's checksum, one
warning line says where, and nothing is written into the store. (Root writes anywhere: there the writability
check is patched, as tests/data/test_data_probe.py does.)"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from data_fixtures import write_parquet_dataset  # noqa: E402

from stride.cli.main import main  # noqa: E402
from stride.config import load_config  # noqa: E402
from stride.data import normalize  # noqa: E402
from stride.data.ingest import ingest  # noqa: E402
from stride.data.loader import ShardedLoader  # noqa: E402
from stride.data.splits import build_store_sources  # noqa: E402

MODES = [
    ['data.columns=["f2", "close"]'],  # `select`: the docs' own example, a column subset
    ['data.normalize="expanding"'],
    ['data.normalize="rolling"', "data.normalize_window=5"],
    ['data.normalize="train"', 'data.batch_dtype="bfloat16"'],
]


def _cfg(store: Path, *extra: str):  # noqa: ANN202
    base = ['data.source="store"', f'data.store="{store}"', "data.seq_len=8", "data.horizons=[1, 3]",
            "data.val_fraction=0.3", "data.prefetch=0", "data.gather_threads=1"]
    return load_config(overrides=base + list(extra)).data


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*")}


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Path, Path]:
    """The same data twice: a writable store (the reference) and one made read-only."""
    write_parquet_dataset(tmp_path / "src", n_days=2, per_day=60)
    rw = ingest(tmp_path / "src", tmp_path / "rw")
    ro = tmp_path / "ro" / "store"
    ro.parent.mkdir()
    shutil.copytree(rw, ro)
    return rw, ro


@pytest.fixture
def read_only(stores: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """Make stores[1] read-only (chmod; for root, whose writes chmod does not stop, os.access says no for it)."""
    ro = stores[1]
    monkeypatch.setenv("STRIDE_CACHE_DIR", str(tmp_path / "cache"))
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr(normalize.os, "access",
                            lambda p, mode: False if Path(p).is_relative_to(ro) else real(p, mode))
    for p in [ro, *ro.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o222)
    yield ro
    for p in [ro, *ro.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)


@pytest.mark.parametrize("extra", MODES, ids=["select", "expanding", "rolling", "train-bf16"])
def test_read_only_store_derives_into_the_user_cache(stores: tuple[Path, Path], read_only: Path, tmp_path: Path,
                                                     extra: list[str], caplog: pytest.LogCaptureFixture) -> None:
    rw, ro = stores
    before = _tree(ro)
    ref = build_store_sources(_cfg(rw, *extra))
    with caplog.at_level(logging.WARNING, logger="stride.data"):
        got = build_store_sources(_cfg(ro, *extra))
    assert _tree(ro) == before and not (ro / "derived").exists()  # nothing written into the store
    sha = (rw / "manifest.json").read_text().split('"values.bin"')[1].split('"sha256": "')[1][:16]
    folder = tmp_path / "cache" / "derived" / sha
    cached = [p for p in folder.iterdir() if p.suffix != ".json"]  # beside each cache: its record (name.json)
    assert len(cached) == 1 and not cached[0].name.startswith(".")
    assert sorted(p.name for p in folder.iterdir()) == [cached[0].name, f"{cached[0].name}.json"]
    lines = [r.getMessage() for r in caplog.records if "read-only" in r.getMessage()]
    assert len(lines) == 1 and str(ro) in lines[0] and str(cached[0].parent) in lines[0]
    for split in ("train", "val"):
        a, b = getattr(ref, split), getattr(got, split)
        for (xr, yr), (xg, yg) in zip(list(ShardedLoader(a, 16, seed=1))[:3], list(ShardedLoader(b, 16, seed=1))[:3],
                                      strict=True):
            assert torch.equal(xr, xg) and torch.equal(yr, yg)
    stamp = cached[0].stat().st_mtime_ns
    again = build_store_sources(_cfg(ro, *extra))  # the user cache is reused, not rebuilt
    assert cached[0].stat().st_mtime_ns == stamp and [p for p in folder.iterdir() if p.suffix != ".json"] == cached
    assert torch.equal(next(iter(ShardedLoader(again.train, 16, seed=1)))[0],
                       next(iter(ShardedLoader(got.train, 16, seed=1)))[0])


def test_a_write_refused_after_the_check_falls_back_too(stores: tuple[Path, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only mount that os.access does not report: the failed write sends the cache to the user folder."""
    _, ro = stores
    monkeypatch.setenv("STRIDE_CACHE_DIR", str(tmp_path / "cache"))
    real = normalize._build

    def refuse_in_store(out: Path, *a: object) -> None:
        if out.is_relative_to(ro):
            raise OSError(errno.EROFS, "Read-only file system", str(out))
        real(out, *a)

    monkeypatch.setattr(normalize, "_build", refuse_in_store)
    build_store_sources(_cfg(ro, 'data.normalize="expanding"'))
    assert len(list((tmp_path / "cache" / "derived").rglob("expanding-*.f32"))) == 1
    assert not list(ro.rglob("expanding-*"))


def test_train_on_a_read_only_store(stores: tuple[Path, Path], read_only: Path, tmp_path: Path,
                                    caplog: pytest.LogCaptureFixture) -> None:
    """The audit's command: `stride train` with a column subset on a read-only store (it was `permission denied`)."""
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'[data]\nsource = "store"\nstore = "{read_only}"\nseq_len = 8\nhorizons = [1, 3]\n'
                   'val_fraction = 0.3\ncolumns = ["close", "f1"]\ntarget_column = "close"\n'
                   "[train]\nsteps = 2\nbatch_size = 16\nval_every = 0\nthreads = 1\n[metrics]\nflops = false\n")
    before = _tree(read_only)
    assert main(["train", str(cfg), "--no-progress", "--out", str(tmp_path / "run")]) == 0
    assert _tree(read_only) == before
    assert any("read-only" in r.getMessage() for r in caplog.records)
