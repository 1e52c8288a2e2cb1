"""`stride report` of a sweep folder leaves the sweep's own report alone (audit 10, F5).

Before: `stride report SWEEP_DIR` wrote "wrote SWEEP_DIR/report.html and SWEEP_DIR/summary.md", replacing the
sweep's report (seed-level pairs, plots, cost) with a bench-style table of `sweep:<id>` workloads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.cli.main import main


@pytest.fixture(scope="module")
def finished(config, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sw") / "s"
    assert main(["sweep", str(config), "--grid", "train.seed=0,1", "--pack", "2", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("which", ["folder", "results.json"])
def test_stride_report_refuses_a_sweep_folder_in_one_line(finished, capsys, which) -> None:
    before = {n: (finished / n).read_bytes() for n in ("report.html", "summary.md")}
    assert b"Pairs of configurations" in before["summary.md"]
    target = finished if which == "folder" else finished / "results.json"
    capsys.readouterr()
    assert main(["report", str(target)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == (
        f"stride report: {finished} is a `stride sweep` folder (sweep.json): its report.html and summary.md are the "
        f"sweep's own and are left as they are; run the same `stride sweep ... --out {finished}` command again to "
        "rewrite them (it trains nothing already finished), or `stride compare` to compare it with other results")
    assert {n: (finished / n).read_bytes() for n in before} == before
