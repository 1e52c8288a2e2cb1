"""A refused or finished rerun leaves the run folder as it was: the same entries, bytes and mtimes.

Before: `--set checkpoint.enabled=true` rerun into a finished run without checkpoints was refused but left an
empty `checkpoints/` in it, and every refused rerun (`stride repro X --out RUN` into a finished run too) rewrote
`.stride-lock` with its old content but a new mtime, while docs/checkpoint.md says a refused resume writes
nothing. Every mtime is set to 2001 first, so a rewrite cannot hide within the clock's resolution.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
from pathlib import Path

import pytest
from tiny_run import MLP_TINY_TOML

from stride.cli.main import main
from stride.files import run_lock

OLD = (1_000_000_000 * 10**9, 1_000_000_000 * 10**9)
TOML = MLP_TINY_TOML


def aged_snapshot(*roots: Path) -> dict[str, tuple]:
    """Set every mtime under `roots` (and theirs) to 2001; then `snapshot`."""
    for root in roots:
        for p in [*root.rglob("*"), root]:
            os.utime(p, ns=OLD)
    return snapshot(*roots)


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every entry under `roots` and each root: its mtime, and a file's bytes (sha256)."""
    out = {}
    for root in roots:
        for p in [root, *sorted(root.rglob("*"))]:
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            out[p.as_posix()] = (p.stat().st_mtime_ns, digest)
    return out


def cli(*args: str) -> tuple[int, str]:
    """`stride ARGS` in this process: exit status and stderr."""
    import torch

    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main(list(args))
    finally:
        torch.use_deterministic_algorithms(False)
    return rc, err.getvalue()


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TOML)
    return path


def test_checkpoints_on_into_a_finished_run_without_them_is_refused_and_creates_nothing(config, tmp_path):
    run = tmp_path / "run"
    assert cli("train", str(config), "--out", str(run))[0] == 0
    before = aged_snapshot(run)
    rc, err = cli("train", str(config), "--out", str(run), "--set", "checkpoint.enabled=true")
    assert rc == 2 and "holds a finished run (summary.json) and no valid checkpoint" in err
    assert not (run / "checkpoints").exists()
    assert snapshot(run) == before  # the lock file's mtime and the folder's too


def test_repro_into_a_finished_run_is_refused_and_changes_nothing(config, tmp_path):
    first, other = tmp_path / "first", tmp_path / "other"
    for out in (first, other):
        assert cli("train", str(config), "--out", str(out))[0] == 0
    before = aged_snapshot(first, other)
    rc, err = cli("repro", str(first), "--out", str(other))
    assert rc == 2
    assert "holds a finished run (summary.json, 4 steps) and this command runs with checkpoint.enabled = false" in err
    assert snapshot(first, other) == before


@pytest.mark.parametrize("outside", [False, True])
def test_a_finished_checkpointed_run_rerun_and_a_refused_config_change_change_no_mtime(outside, config, tmp_path):
    """Checkpoints in the run folder, or in a folder outside it (an absolute checkpoint.dir, with its own lock)."""
    run = tmp_path / "run"
    ckpt = tmp_path / "ckpt" if outside else run / "checkpoints"
    sets = ["--set", "checkpoint.enabled=true", *(["--set", f"checkpoint.dir={ckpt}"] if outside else [])]
    assert cli("train", str(config), "--out", str(run), *sets)[0] == 0
    assert (ckpt / "step_00000004").is_dir() and (ckpt / run_lock.LOCK_NAME).is_file() == outside
    before = aged_snapshot(run, ckpt)
    rc, err = cli("train", str(config), "--out", str(run), *sets)
    assert rc == 0 and "finished at step 4: nothing trained, no file changed" in err
    assert snapshot(run, ckpt) == before
    rc, err = cli("train", str(config), "--out", str(run), *sets, "--set", "optim.lr=0.5")
    assert rc == 2 and "optim.lr: 0.001 (checkpoint) -> 0.5 (now)" in err
    assert snapshot(run, ckpt) == before


def test_a_refused_run_into_a_checkpoint_folder_it_had_to_make_removes_it(config, tmp_path):
    """checkpoint.dir nested two folders deep outside the run, made for a run that is then refused: both go, and
    the folder above them keeps its mtime."""
    run, above = tmp_path / "run", tmp_path / "above"
    above.mkdir()
    assert cli("train", str(config), "--out", str(run))[0] == 0
    before = aged_snapshot(run, above)
    rc, _ = cli("train", str(config), "--out", str(run), "--set", "checkpoint.enabled=true", "--set",
                f"checkpoint.dir={above / 'a' / 'b'}")
    assert rc == 2 and not (above / "a").exists()
    assert snapshot(run, above) == before


def test_a_hold_that_wrote_nothing_puts_back_the_lock_files_and_the_folders_times(tmp_path):
    with_lock, without = tmp_path / "with", tmp_path / "without"
    for d in (with_lock, without):
        d.mkdir()
        (d / "summary.json").write_text("{}")
    (with_lock / run_lock.LOCK_NAME).write_text('{"pid": 1, "host": "earlier", "since": 0}')
    before = aged_snapshot(with_lock, without)
    for d in (with_lock, without):
        with run_lock.held(d):
            pass
    assert snapshot(with_lock, without) == before
    with run_lock.held(without):  # something written: the times say so
        (without / "metrics.jsonl").write_text("{}\n")
    assert snapshot(without)[without.as_posix()][0] != OLD[1]


def test_a_profile_folder_is_named_as_one(config, tmp_path):
    """Audit 12 F6: `stride train --out` of a `stride profile` folder said "a finished run (6 steps)" for `--steps 3`;
    the refusal now says it is a profile folder and that its step count includes the profiler's extra steps."""
    run = tmp_path / "prof"
    assert cli("train", str(config), "--out", str(run))[0] == 0
    (run / "traces").mkdir()
    (run / "analysis.json").write_text("{}")
    before = aged_snapshot(run)
    rc, err = cli("train", str(config), "--out", str(run))
    assert rc == 2
    assert ("holds a finished `stride profile` run (summary.json, traces/, 4 steps trained, with the profiler's wait, "
            "warm-up and closing steps)") in err
    assert snapshot(run) == before
