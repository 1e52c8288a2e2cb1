"""A `stride train` run on a contended host is read as one: compare gives it no verdict, report no model bottleneck.

First contact: two quick-start runs on a busy host (`run_queue_waiting_threads` 0.84 and 1.03, each summary with a
`contention_note`) compared as "slower (noise not measured: 1 run each, 2 % assumed)", and `stride report` of one
advised "fuse them with torch.compile" at 3.4 % MFU: the run folder's entry dropped both contention fields, which
a `stride bench` entry carries and both commands already read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stride.bench.results import ResultsError, make_results
from stride.cli.main import main
from stride.report.compare import compare_results
from stride.report.contended import contended_verdict
from stride.report.inputs import resolve
from stride.report.recommend import load_prices
from stride.report.render import render_report


def _note(waiting: float) -> str:
    return (f"on average {waiting:.2f} of this process's threads (2 torch threads) waited for a core that other "
            "processes held: every figure is of a contended host and can be tens of times slow; rerun on a quiet "
            "host, or with train.threads below the free cores (e.g. train.threads=1)")


def _run(path: Path, samples_per_s: float, waiting: float | None, contended: bool) -> Path:
    """A run folder with the summary.json fields `stride train` writes that compare and report read."""
    path.mkdir(parents=True)
    summary: dict[str, Any] = {
        "name": "quickstart", "status": "finished", "steps": 30, "samples_per_s": samples_per_s,
        "step_time_s": 64 / samples_per_s, "mfu": 0.034, "peak_mem_bytes": 50_000_000, "world_size": 1,
        "step_time_breakdown_s": {"data": 0.0006, "forward": 0.0963, "backward": 0.1653, "optimizer": 0.0089,
                                  "other": 0.0002},
        "run_queue_waiting_threads": waiting, "contention_note": _note(waiting) if contended and waiting else None,
    }
    if contended and waiting is None:
        summary["contention_note"] = _note(1.0)
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def _row(out: str) -> str:
    return "\n".join(line for line in out.splitlines() if "│" in line and "workload" not in line)


def test_two_contended_train_runs_get_no_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _run(tmp_path / "a", 388.0, 0.84, contended=True)
    b = _run(tmp_path / "b", 67.0, 1.03, contended=True)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    row = _row(out)
    assert "0.173" in row  # the ratio is still shown
    assert "slower" not in row and "faster" not in row and "within noise" not in row
    assert "no verdict: the host was busy" in out and "A 0.84, B 1.03" in out and "quiet host" in out
    assert "A: on average 0.84 of this process's threads" in out  # the runs' own notes, under the table
    assert main(["compare", str(a), str(b), "--json"]) == 0
    [r] = json.loads(capsys.readouterr().out)
    assert r["ratio"] == pytest.approx(67 / 388)
    assert r["verdict"] == ("no verdict: the host was busy (threads waiting for a core on average: A 0.84, B 1.03); "
                            "rerun on a quiet host")
    assert r["contention_notes"] == {"A": _note(0.84), "B": _note(1.03)}


def test_one_contended_side_is_enough_to_withhold_the_verdict(tmp_path: Path) -> None:
    (a, _), (b, _) = resolve(_run(tmp_path / "a", 2807.0, 0.0005, False)), resolve(_run(tmp_path / "b", 236.0,
                                                                                        1.07, True))
    [r] = compare_results(a, b)
    assert r["ratio"] == pytest.approx(236 / 2807)
    assert r["verdict"] == ("no verdict: the host was busy (threads waiting for a core on average: B 1.07); "
                            "rerun on a quiet host")
    assert list(r["contention_notes"]) == ["B"]


def test_uncontended_train_runs_are_judged_as_before(tmp_path: Path) -> None:
    # waiting below the note's threshold and no note: a quiet host, judged against the 2 % floor as before
    (a, _), (b, _) = resolve(_run(tmp_path / "a", 388.0, 0.02, False)), resolve(_run(tmp_path / "b", 67.0, 0.03,
                                                                                      False))
    [r] = compare_results(a, b)
    assert r["verdict"] == "slower (noise not measured: 1 run each, 2 % assumed)"
    assert r["noise_band"] == 0.02 and r["contention_notes"] == {}


def test_a_steady_but_starved_bench_entry_gets_no_verdict_either(tmp_path: Path) -> None:
    """A bench entry's spread widens the band only where the contention moved its windows apart: at a 1 % cv a
    starved run (audit 21, H1: 500x slow at a 1.4 % cv) was judged "slower" by its narrow band."""
    def entry(median: float, waiting: float | None, note: str | None) -> dict[str, Any]:
        return {"name": "mlp_tiny", "version": 2, "mfu": 0.1, "peak_mem_bytes": 2**20, "time_to_target_s": None,
                "step_time_breakdown_s": {"forward": 0.3, "backward": 0.6}, "run_queue_waiting_threads": waiting,
                "contention_note": note,
                "throughput": {"unit": "samples/s", "median": median, "min": median * 0.99, "max": median * 1.01,
                               "cv": 0.01, "n": 3}}

    quiet = make_results("quick", {}, [entry(1000.0, 0.01, None)])
    busy = make_results("quick", {}, [entry(40.0, 0.97, _note(0.97))])
    [r] = compare_results(quiet, busy)
    assert r["verdict"].startswith("no verdict: the host was busy") and "B 0.97" in r["verdict"]
    [r] = compare_results(quiet, make_results("quick", {}, [entry(900.0, 0.02, None)]))
    assert r["verdict"] == "slower"


def test_the_verdict_without_a_recorded_wait_still_names_the_sides() -> None:
    noted = {"contention_note": _note(1.0)}
    assert contended_verdict({"A": noted, "B": {}}) == ("no verdict: the host was busy (A: its threads waited for "
                                                        "cores); rerun on a quiet host")
    assert "A and B: their threads" in (contended_verdict({"A": noted, "B": noted}) or "")
    assert contended_verdict({"A": {"run_queue_waiting_threads": 0.9}, "B": {}}) is None  # the note decides


def test_report_of_a_contended_train_run_names_the_contended_host(tmp_path: Path) -> None:
    run = _run(tmp_path / "q1", 67.0, 1.03, contended=True)
    _, md = render_report(run, load_prices(), lambda line: None)
    text = md.read_text()
    assert "bottleneck contended host" in text and "1.03 threads on average" in text and "quiet host" in text
    assert "low MFU" not in text and "torch.compile" not in text


def test_report_of_a_quiet_train_run_keeps_its_low_mfu_advice(tmp_path: Path) -> None:
    run = _run(tmp_path / "q1", 388.0, 0.02, contended=False)
    _, md = render_report(run, load_prices(), lambda line: None)
    text = md.read_text()
    assert "bottleneck overhead (low MFU)" in text and "3.4% MFU" in text and "contended" not in text


@pytest.mark.parametrize(("field", "value", "why"), [
    ("contention_note", 5, "contention_note = 5 is not text or null"),
    ("run_queue_waiting_threads", "busy", "run_queue_waiting_threads = 'busy' is not a number or null"),
    ("run_queue_waiting_threads", -0.5, "run_queue_waiting_threads = -0.5 is impossible (below 0)"),
])
def test_a_summary_with_impossible_contention_fields_is_refused(tmp_path: Path, field: str, value: Any,
                                                                 why: str) -> None:
    run = _run(tmp_path / "r", 388.0, 0.84, contended=True)
    s = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**s, field: value}))
    with pytest.raises(ResultsError, match="summary.json: " + why.replace("(", r"\(").replace(")", r"\)")):
        resolve(run)
