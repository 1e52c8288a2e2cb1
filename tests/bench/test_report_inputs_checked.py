"""What `stride compare` and `stride report` read holds each workload once, at least one, with a possible count of
measurements; compared throughputs are in one unit. Each refusal is one line naming the file (or workload) and the
field, exit 2, and no report is written.

Audit 2: a results file listing one workload twice was accepted (compare dropped the second entry silently, report
listed it twice: "fastest of 2 configurations"); so were `throughput.unit` "timesteps/s" against "samples/s"
(judged 1.000 "within noise"), `throughput.n = 0` beside a median, and `workloads: []` (compare: "missing in B",
report: an empty report).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stride.bench.results import make_results
from stride.cli.main import main


def _w(name: str, median: float = 100.0, unit: str = "samples/s", **throughput: object) -> dict:
    return {"name": name, "version": 1, "mfu": 0.5, "peak_mem_bytes": 2**20, "time_to_target_s": None,
            "step_time_breakdown_s": {"forward": 0.3, "backward": 0.6},
            "throughput": {"unit": unit, "median": median, "min": median * 0.99, "max": median * 1.01, "cv": 0.01,
                           "n": 3, **throughput}}


def _results(path: Path, workloads: list[dict], **top: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**make_results("quick", {}, [_w("seed")]), "workloads": workloads, **top}))
    return path


def _refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    rc = main(list(args))
    out = capsys.readouterr()
    assert rc == 2, (out.out, out.err)
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"stride {args[0]}: "), out.err
    assert "Traceback" not in out.err and "within noise" not in out.out
    return lines[0]


def test_a_workload_listed_twice_is_refused_by_compare_and_report(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    good = _results(tmp_path / "a" / "results.json", [_w("ts_transformer_tiny"), _w("mlp_tiny")])
    dup = _results(tmp_path / "b" / "results.json",
                   [_w("ts_transformer_tiny"), _w("mlp_tiny"), _w("ts_transformer_tiny", 150.0)])
    for args in (("compare", str(good), str(dup)), ("compare", str(dup), str(good), "--json"), ("report", str(dup))):
        err = _refused(capsys, *args)
        assert f"{dup}: workloads[2] (ts_transformer_tiny) is listed twice (also workloads[0])" in err
    assert not (dup.parent / "report.html").exists() and not (dup.parent / "summary.md").exists()
    assert main(["compare", str(good), str(good)]) == 0  # each workload once: compared


def test_a_results_file_without_workloads_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _results(tmp_path / "a" / "results.json", [_w("mlp_tiny")])
    empty = _results(tmp_path / "b" / "results.json", [])
    for args in (("compare", str(good), str(empty)), ("report", str(empty))):
        assert f"{empty}: workloads is empty" in _refused(capsys, *args)
    stopped = _results(tmp_path / "c" / "results.json", [], partial={"done": 0, "planned": 4, "pending": ["x"]})
    assert "none of its 4 runs measured" in _refused(capsys, "report", str(stopped))
    assert not (empty.parent / "report.html").exists()


@pytest.mark.parametrize(("n", "words"), [
    (0, "throughput.n = 0 (no measurement) beside throughput.median = 100.0"),
    (-1, "throughput.n = -1 is not a count"),
    (2.5, "throughput.n = 2.5 is not a count"),
])
def test_an_impossible_count_of_measurements_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        n: float, words: str) -> None:
    bad = _results(tmp_path / "b" / "results.json", [_w("mlp_tiny", n=n)])
    for args in (("compare", str(bad), str(bad)), ("report", str(bad))):
        err = _refused(capsys, *args)
        assert f"{bad}: workloads[0] (mlp_tiny): {words}" in err


def test_no_measurement_without_figures_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = _w("mlp_tiny", n=0)
    w["throughput"].update(median=None, min=None, max=None, cv=None)
    none = _results(tmp_path / "a" / "results.json", [w])
    assert main(["compare", str(none), str(none), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["verdict"] == "n/a"


def test_throughput_units_that_differ_are_refused_naming_both(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    a = _results(tmp_path / "a" / "results.json", [_w("ts_transformer_tiny", unit="timesteps/s")])
    b = _results(tmp_path / "b" / "results.json", [_w("ts_transformer_tiny", unit="samples/s")])
    err = _refused(capsys, "compare", str(a), str(b))
    assert "ts_transformer_tiny: throughput units differ: A in 'timesteps/s', B in 'samples/s'" in err
    assert "no ratio" in err
    # among other workloads: that row gets no verdict, the others keep theirs, exit 2 after the table
    a2 = _results(tmp_path / "a2" / "results.json", [_w("mlp_tiny"), _w("ts", unit="tokens/s")])
    b2 = _results(tmp_path / "b2" / "results.json", [_w("mlp_tiny"), _w("ts", unit="samples/s")])
    assert main(["compare", str(a2), str(b2), "--json"]) == 2
    out = capsys.readouterr()
    rows = {r["name"]: r for r in json.loads(out.out)}
    assert rows["mlp_tiny"]["verdict"] == "within noise" and rows["ts"]["ratio"] is None
    assert rows["ts"]["verdict"] == "units differ: not comparable"
    assert "'tokens/s'" in out.err and "'samples/s'" in out.err and len(out.err.strip().splitlines()) == 1
    assert main(["compare", str(b2), str(b2)]) == 0  # one unit: compared


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_device_given_as_results_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    """`stride report /dev/zero` and `stride compare FIFO FIFO` read until memory ran out or blocked forever."""
    import os
    import subprocess
    import sys

    if kind == "fifo":
        path = tmp_path / "r.json"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
        if not path.exists():
            pytest.skip("no /dev/zero here")
    for args in (["report", str(path)], ["compare", str(path), str(path)]):
        res = subprocess.run([sys.executable, "-m", "stride", *args], capture_output=True, text=True, timeout=60)
        assert res.returncode == 2, res.stderr
        what = "a FIFO" if kind == "fifo" else "a character device"
        assert f"results file {path} is {what}, not a regular file" in res.stderr


def test_a_training_run_of_zero_throughput_counts_one_measurement(tmp_path: Path) -> None:
    """`samples_per_s` 0.0 was read as n = 0 beside median 0.0, which `count_problem` refuses."""
    from stride.report.inputs import resolve

    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"name": "r", "steps": 5, "samples_per_s": 0.0, "mfu": None,
                                                  "peak_mem_bytes": 1, "step_time_breakdown_s": {}}))
    tput = resolve(run)[0]["workloads"][0]["throughput"]
    assert (tput["median"], tput["n"]) == (0.0, 1)
    (run / "summary.json").write_text(json.dumps({"name": "r", "steps": 0, "samples_per_s": None}))
    assert resolve(run)[0]["workloads"][0]["throughput"]["n"] == 0  # no figure: no measurement
