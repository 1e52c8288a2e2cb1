"""`stride compare` says under its table when both sides are one run each: the band then holds each run's own spread
(its timed steps or windows), not the drift between runs. A world-sweep audit (session 36, AMD EPYC family 26 model
2, 2 cores, shared) compared 28 pairs of identical one-run mlp_tiny points: with each point's timed-step spread as its
band, 21 one-rank pairs still read faster or slower (0.72-1.40x), the verdict saying nothing of it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from stride.report.compare import compare_results, compare_table
from stride.report.inputs import resolve
from tests.report.test_audit_compare_run_spread import A_RATES, B_RATES, _rows, _run


def _caption(rows: list[dict]) -> str:
    cap = compare_table(rows).caption
    return "" if cap is None else str(cap)


def test_two_run_folders_are_named_one_run_each(tmp_path: Path) -> None:
    (ra, _), (rb, _) = resolve(_run(tmp_path / "a", 1692.0, _rows(A_RATES))), resolve(
        _run(tmp_path / "b", 1100.0, _rows(B_RATES)))
    [r] = compare_results(ra, rb)
    assert r["one_run_each"] is True and r["verdict"] == "slower"
    cap = _caption([r])
    assert "quickstart: one run each side" in cap and "drift between runs" in cap and "--repeats 3" in cap


def test_repeated_runs_on_one_side_carry_no_such_note(tmp_path: Path) -> None:
    """A world sweep's point of 3 runs has a spread over runs: compared with it, the note is not said."""
    (ra, _), (rb, _) = resolve(_run(tmp_path / "a", 1692.0, _rows(A_RATES))), resolve(
        _run(tmp_path / "b", 1100.0, _rows(B_RATES)))
    rb = copy.deepcopy(rb)
    rb["workloads"][0]["runs"] = 3
    [r] = compare_results(ra, rb)
    assert r["one_run_each"] is False and "one run each" not in _caption([r])


def test_a_results_file_without_runs_is_not_guessed(tmp_path: Path) -> None:
    """An older results file names no run count: nothing is said of it (it may hold repeats)."""
    (ra, _), (rb, _) = resolve(_run(tmp_path / "a", 1692.0, _rows(A_RATES))), resolve(
        _run(tmp_path / "b", 1100.0, _rows(B_RATES)))
    rb = json.loads(json.dumps(rb))
    del rb["workloads"][0]["runs"]
    [r] = compare_results(ra, rb)
    assert r["one_run_each"] is False and "one run each" not in _caption([r])
