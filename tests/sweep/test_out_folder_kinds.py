"""`stride train`, `stride bench` and `stride sweep` refuse an --out holding another command's results.

Before: `stride bench --out RUN` and `stride sweep --out RUN` wrote results.json, report.html, points/ ... into
a finished training run (then `stride report RUN` / `stride compare RUN X` read the bench or the sweep instead
of the run); `stride sweep --out BENCHDIR` replaced a bench's results.json; `stride train --out BENCHDIR` or
`--out SWEEPDIR` wrote config.toml, summary.json and metrics.jsonl beside the results. Now each is refused in
one line naming what the folder holds, before anything is written (stride.files.folder_kind); a command rerun
on its own folder behaves as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.files.folder_kind import what_it_holds

BENCH = ["--workloads", "mlp_tiny", "--set", "train.steps=4", "--set", "train.val_every=4", "--set",
         "data.n_steps=1024", "--no-report"]
GRID = ["--grid", "optim.lr=1e-3,2e-3", "--pack", "2"]
OLD = (1_000_000_000 * 10**9, 1_000_000_000 * 10**9)  # 2001: any rewrite shows as a new mtime


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under `root` and `root` itself: its mtime, and a file's bytes (sha256)."""
    out = {".": (os.stat(root).st_mtime_ns,)}
    for p in sorted(root.rglob("*")):
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[p.relative_to(root).as_posix()] = (p.stat().st_mtime_ns, digest)
    return out


def age(root: Path) -> dict[str, tuple]:
    """Set every mtime under `root` to 2001 (so a rewrite cannot hide within the clock's resolution); its snapshot."""
    for p in [*root.rglob("*"), root]:
        os.utime(p, ns=OLD)
    return snapshot(root)


@pytest.fixture(scope="module")
def made(config, tmp_path_factory) -> dict[str, Path]:
    """A finished training run, a bench's results and a finished sweep, each in its own folder."""
    root = tmp_path_factory.mktemp("made")
    folders = {"train": root / "run", "bench": root / "bench", "sweep": root / "sweep"}
    assert main(["train", str(config), "--out", str(folders["train"]), "--no-progress"]) == 0
    assert main(["bench", *BENCH, "--out", str(folders["bench"])]) == 0
    assert main(["sweep", str(config), *GRID, "--out", str(folders["sweep"])]) == 0
    return folders


@pytest.fixture
def folders(made, tmp_path) -> dict[str, Path]:
    """Copies of the three folders (a test that fails must not spoil the next one's)."""
    return {k: Path(shutil.copytree(v, tmp_path / k, symlinks=True)) for k, v in made.items()}


def command(kind: str, config: Path, out: Path, *extra: str) -> list[str]:
    return {"train": ["train", str(config), "--no-progress"], "bench": ["bench", *BENCH],
            "sweep": ["sweep", str(config), *GRID]}[kind] + ["--out", str(out), *extra]


HOLDS = {"train": "holds a `stride train` run (summary.json, metrics.jsonl)",
         "bench": "holds `stride bench` results (results.json, suite 'custom')",
         "sweep": "holds a `stride sweep` (sweep.json)"}


@pytest.mark.parametrize(("cmd", "target"), [(c, t) for c in HOLDS for t in HOLDS if c != t])
def test_a_folder_holding_another_commands_results_is_refused_and_left_as_it_was(cmd, target, config, folders,
                                                                                    capsys):
    out = folders[target]
    before = age(out)
    capsys.readouterr()
    rc = main(command(cmd, config, out))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"stride {cmd}: --out {out} {HOLDS[target]}: ")
    assert err[0].endswith("nothing was written; use another --out")
    assert snapshot(out) == before


@pytest.mark.parametrize("target", ["bench", "sweep"])
def test_train_overwrite_does_not_replace_a_bench_or_a_sweep(target, config, folders, capsys):
    """--overwrite deletes a run's files (report.html and summary.md among them): not a bench's or a sweep's."""
    out = folders[target]
    before = age(out)
    assert main(command("train", config, out, "--overwrite")) == 2
    assert HOLDS[target] in capsys.readouterr().err
    assert snapshot(out) == before


def test_each_command_on_its_own_folder_behaves_as_before(config, folders, capsys):
    capsys.readouterr()
    # a finished run without checkpoints: refused as before (exit 2)
    assert main(command("train", config, folders["train"])) == 2
    assert ("holds a finished run (summary.json, 4 steps) and this command runs with checkpoint.enabled = false"
            in capsys.readouterr().err)
    # a bench's results: resumed (every run kept), a sweep's: nothing trained again
    assert main(command("bench", config, folders["bench"])) == 0
    assert json.loads((folders["bench"] / "results.json").read_text())["suite"] == "custom"
    assert main(command("sweep", config, folders["sweep"])) == 0
    assert "trained 0 point(s)" in capsys.readouterr().err


def test_a_world_sweep_does_not_replace_another_suites_results(config, folders, capsys):
    out = folders["bench"]
    before = age(out)
    assert main(["bench", "--sweep", "world", "--world-sizes", "1", *BENCH, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "holds `stride bench` results (results.json, suite 'custom'), which a world sweep's" in err
    assert snapshot(out) == before


@pytest.mark.parametrize("target", ["train", "bench", "sweep"])
def test_export_to_a_folder_holding_results_is_refused_before_the_sweep_trains(target, config, folders, tmp_path,
                                                                              capsys):
    to = folders[target]
    before, sweep = age(to), tmp_path / "new-sweep"
    rc = main(command("sweep", config, sweep, "--export", "0", "--export-to", str(to)))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"stride sweep: --export-to {to} {HOLDS[target]}: writing point ")
    assert snapshot(to) == before and not sweep.exists()  # nothing trained


def test_what_a_folder_holds(tmp_path):
    assert what_it_holds(tmp_path / "missing") == [] and what_it_holds(tmp_path) == []
    (tmp_path / "checkpoints" / "step_00000004").mkdir(parents=True)  # what `stride sweep --export-to` writes
    (tmp_path / "results.json").write_text('{"suite": "sweep"}')
    (tmp_path / "metrics.jsonl").write_text("")  # empty: nothing logged yet
    assert [h.describe() for h in what_it_holds(tmp_path)] == [
        "a `stride train` run (checkpoints in checkpoints/)", "a `stride sweep` (results.json, suite 'sweep')"]
    (tmp_path / "results.json").write_text("not json")
    assert [h.kind for h in what_it_holds(tmp_path)] == ["train", "bench"]


def test_every_trainer_run_refuses_a_bench_or_sweep_folder(config, folders):
    """`stride profile`, a one-process `stride repro` and Python callers open their folder through
    `open_run_folder`: a folder holding a bench's or a sweep's results is refused there too, nothing written."""
    from stride.checkpoint.rerun import open_run_folder
    from stride.config.loader import load_config
    from stride.files.folder_kind import FolderHoldsOther

    cfg = load_config(config, [])
    for target in ("bench", "sweep"):
        before = snapshot(folders[target])
        with pytest.raises(FolderHoldsOther):
            open_run_folder(cfg, folders[target], overwrite=False)
        assert snapshot(folders[target]) == before
