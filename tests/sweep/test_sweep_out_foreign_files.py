"""Audit #4: `--out X` where X held a user's report.html and summary.md replaced both without a word. A report file
in --out with no sweep.json beside it that is not a sweep's own is refused, naming it; a sweep's own (its
sweep.json deleted, the way to extend a grid) and unrelated files stay."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stride.cli.main import main

GRID = ["--grid", "train.seed=0..1", "--pack", "2"]


def sweep(config: Path, out: Path) -> list[str]:
    return ["sweep", str(config), *GRID, "--out", str(out)]


@pytest.mark.parametrize("name", ["report.html", "summary.md", "results.json", "table.parquet"])
def test_a_report_file_no_sweep_wrote_is_refused(config, tmp_path, capsys, name) -> None:
    out = tmp_path / "x"
    out.mkdir()
    (out / name).write_text("{}" if name == "results.json" else "mine\n")
    (out / "notes.txt").write_text("notes\n")
    assert main(sweep(config, out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and name in err[0]
    if name != "results.json":  # a results.json is refused first as a bench's (stride.files.folder_kind)
        assert f"{out / name}: not a `stride sweep` report" in err[0]
    assert sorted(p.name for p in out.iterdir()) == sorted([name, "notes.txt"])  # nothing written, nothing lost
    assert (out / name).read_text() in ("{}", "mine\n")


def test_a_sweeps_own_report_files_without_sweep_json_resume(config, tmp_path, capsys) -> None:
    out = tmp_path / "s"
    assert main(sweep(config, out)) == 0
    (out / "notes.txt").write_text("notes\n")
    copy = Path(shutil.copytree(out, tmp_path / "copy"))
    (copy / "sweep.json").unlink()
    assert main(sweep(config, copy)) == 0
    assert (copy / "notes.txt").read_text() == "notes\n"
