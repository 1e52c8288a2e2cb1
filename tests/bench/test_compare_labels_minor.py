"""Minor labels of `stride compare` and its inputs (outside audit of the benchmark figures): a `stride train`
folder's throughput (its mean over timed steps) was headed "median"; a string samples_per_s in a summary.json was
named `throughput.median 'x'`, a key the file does not have; version "3" against 3 did not say the string is text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stride.cli.main import main


def _run(path: Path, samples_per_s: Any) -> Path:
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({
        "name": "mlp", "samples_per_s": samples_per_s, "steps": 10, "mfu": None, "peak_mem_bytes": 1,
        "step_time_breakdown_s": {}, "time_to_target_s": None}))
    return path


def _results(path: Path, version: Any) -> Path:
    t = {"unit": "samples/s", "median": 1000.0, "min": 900.0, "max": 1100.0, "cv": 0.08, "n": 3}
    path.write_text(json.dumps({"schema": "stride.bench.results", "schema_version": 2, "suite": "quick",
                                "environment": {}, "workloads": [
                                    {"name": "mlp", "version": version, "throughput": t, "mfu": None,
                                     "peak_mem_bytes": 1, "step_time_breakdown_s": {}, "time_to_target_s": None}]}))
    return path


def test_run_folders_are_headed_by_what_their_figure_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _run(tmp_path / "a", 1000.0), _run(tmp_path / "b", 1500.0)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "A over timed steps" in out and "B over timed steps" in out and "A median" not in out
    bench = _results(tmp_path / "r.json", None)  # no version, as a run's: one workload, compared
    assert main(["compare", str(bench), str(b)]) == 0
    out = capsys.readouterr().out
    assert "A median" in out and "B over timed steps" in out


def test_a_string_rate_in_a_summary_is_named_by_the_files_key(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _run(tmp_path / "a", 1000.0), _run(tmp_path / "b", "x")
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err  # was: "throughput.median 'x' is not a finite number or null"
    assert err == (f"stride compare: {b / 'summary.json'}: samples_per_s = 'x' is not a number or null (the run's "
                   "throughput.median)\n")


def test_a_text_version_is_said_to_be_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _results(tmp_path / "a.json", "3"), _results(tmp_path / "b.json", 3)
    assert main(["compare", str(a), str(b)]) == 2
    assert "workload versions differ: A has version '3' (text, not a number), B has version 3" in \
        capsys.readouterr().err
