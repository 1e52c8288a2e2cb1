"""`stride compare`'s verdicts agree with the figures it prints, and every refused row fails the command.

Outside audit 7: 1.200 beside a printed ±10 % band read "within noise" (a hidden min/max-overlap rule); a row refused
for a workload version difference exited 0, and an MLP bench against a transformer run read as a version issue; a
results file with a median outside its own [min, max] was judged (a 2.3e304x ratio, "within noise"); the band, said
to be run-to-run noise, is the within-run spread, and 0.978 beside ±2.2 % read "slower".
"""

from __future__ import annotations

import json
import math
import random
from decimal import Decimal
from pathlib import Path

import pytest

from stride.bench.results import ResultsError, make_results, validate_results
from stride.cli.main import main
from stride.report.compare import compare_results, judge, noise_band, shown, within_band


def _w(name: str, median: float, cv: float = 0.01, mn: float | None = None, mx: float | None = None,
       **kw: object) -> dict:
    return {"name": name, "version": 2, "mfu": 0.5, "peak_mem_bytes": 2**20, "time_to_target_s": None,
            "step_time_breakdown_s": {"forward": 0.3, "backward": 0.6},
            "throughput": {"unit": "samples/s", "median": median, "min": median * 0.99 if mn is None else mn,
                           "max": median * 1.01 if mx is None else mx, "cv": cv, "n": 3}, **kw}


def _file(path: Path, *workloads: dict) -> Path:
    """A results.json written as-is (not through make_results, which would refuse a damaged entry)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**make_results("quick", {}, [_w("seed", 1.0)]), "workloads": list(workloads)}))
    return path


def _row(table: str, name: str) -> str:
    return next(line for line in table.splitlines() if f"│ {name} " in line)


def test_the_verdict_follows_the_printed_band_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The audit's pair: ranges [900, 1010] and [1005, 1210] touch, yet 1.200 is far outside the band it printed."""
    a = _file(tmp_path / "A" / "results.json", _w("mlp_tiny", 1000.0, cv=0.05, mn=900.0, mx=1010.0))
    b = _file(tmp_path / "B" / "results.json", _w("mlp_tiny", 1200.0, cv=0.05, mn=1005.0, mx=1210.0))
    assert main(["compare", str(a), str(b)]) == 0
    row = _row(capsys.readouterr().out, "mlp_tiny")
    assert "1.200" in row and "±14.1%" in row and "faster" in row and "within noise" not in row
    # inside the band is within noise, whether the ranges touch or not
    assert judge(_w("x", 1000.0, cv=0.05)["throughput"], _w("x", 1100.0, cv=0.05, mn=1090.0)["throughput"])[1] \
        == "within noise"


def test_the_band_adds_both_sides_spread_and_keeps_its_floor() -> None:
    """A ratio carries the noise of both medians: 2 x sqrt(cv_A^2 + cv_B^2), not twice the larger cv; 2 % at least."""
    t = lambda cv: _w("x", 100.0, cv=cv)["throughput"]  # noqa: E731
    assert noise_band(t(0.003), t(0.011)) == pytest.approx(2 * math.hypot(0.003, 0.011))  # 2.28 %, was 2.2 %
    assert noise_band(t(0.05), t(0.05)) == pytest.approx(0.1414, abs=1e-4)
    assert noise_band(t(0.001), t(0.002)) == 0.02
    one = {"unit": "samples/s", "median": 100.0, "min": 100.0, "max": 100.0, "cv": None, "n": 1}
    assert noise_band(one, t(0.03)) == pytest.approx(0.06)  # a run folder's one figure adds no spread


def test_the_shown_ratio_and_band_never_contradict_the_verdict(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The audit's 0.978 beside ±2.2 % read "slower": the figures were 2.21 % against a 2.185 % band."""
    cv = 0.02185 / (2 * math.sqrt(2))  # both sides: a band of 2.185 %
    a = _file(tmp_path / "A" / "results.json", _w("mlp_tiny", 1000.0, cv=cv), _w("lstm", 1000.0, cv=cv))
    b = _file(tmp_path / "B" / "results.json", _w("mlp_tiny", 977.9, cv=cv), _w("lstm", 990.0, cv=cv))
    assert main(["compare", str(a), str(b)]) == 0
    table = capsys.readouterr().out
    slow = _row(table, "mlp_tiny")
    assert "0.9779" in slow and "±2.18%" in slow and "slower" in slow  # not 0.978 beside ±2.2 %
    plain = _row(table, "lstm")  # far from the edge: the usual 3 digits and 0.1 %
    assert "0.990 " in plain and "±2.2%" in plain and "within noise" in plain
    # on the edge to the last bit (1 - 0.9779 > 0.0221 in floats): within, as |B/A - 1| <= band says
    assert within_band(0.9779, 0.0221) and shown({"ratio": 0.9779, "noise_band": 0.0221}) == ("0.978", "±2.2% assumed")
    rng = random.Random(7)
    for _ in range(3000):
        band = rng.choice([0.02, rng.uniform(0.02, 0.4), round(rng.uniform(0.02, 0.3), 4)])
        edge = rng.choice([1.0, 1 + rng.uniform(-1e-3, 1e-3), 1 + rng.uniform(-1e-7, 1e-7), rng.uniform(0, 2)])
        ratio = 1 + rng.choice((-1, 1)) * band * edge
        ratio = rng.choice([ratio, round(ratio, 4)])
        rt, bt = shown({"ratio": ratio, "noise_band": band, "noise_measured": True})
        assert (abs(Decimal(rt) - 1) <= Decimal(bt[1:-1]) / 100) == within_band(ratio, band), (ratio, band, rt, bt)


def test_the_help_says_what_the_band_is(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "2 x sqrt(cv_A^2 + cv_B^2), at least 2 %" in text and "inside one run" in text
    assert "run-to-run noise" not in text and "workload versions" in text


def test_a_version_difference_fails_the_command_like_a_workload_mismatch(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    a = _file(tmp_path / "A" / "results.json", _w("mlp_tiny", 1000.0), _w("lstm", 1000.0))
    b = _file(tmp_path / "B" / "results.json", _w("mlp_tiny", 1000.0, version=3), _w("lstm", 1000.0))
    assert main(["compare", str(a), str(b), "--json"]) == 2  # the other row keeps its verdict; exit 2 after it
    out = capsys.readouterr()
    rows = {r["name"]: r for r in json.loads(out.out)}
    assert rows["lstm"]["verdict"] == "within noise" and rows["mlp_tiny"]["ratio"] is None
    assert rows["mlp_tiny"]["verdict"] == "versions differ (2 vs 3): not comparable"
    err = out.err.strip().splitlines()
    assert len(err) == 1 and "mlp_tiny: workload versions differ: A has version 2, B has version 3" in err[0]
    one_a = _file(tmp_path / "a1" / "results.json", _w("mlp_tiny", 1000.0))
    one_b = _file(tmp_path / "b1" / "results.json", _w("mlp_tiny", 1000.0, version=None))
    assert main(["compare", str(one_a), str(one_b)]) == 2  # the refusal alone, no table
    out = capsys.readouterr()
    assert out.out == "" and "B has no version (a `stride train` run" in out.err


QUICK = ('[model]\nname = "ts_transformer"\nsize = "tiny"\n[data]\nsource = "synthetic"\nseq_len = 64\n'
         '[train]\nbatch_size = 64\nprecision = "fp32"\n')


def test_the_workload_is_checked_before_the_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bench `mlp_tiny` (version 2) against a transformer run folder (no version) is two workloads."""
    run = tmp_path / "qs"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({
        "name": "quickstart", "steps": 5, "samples_per_s": 80.0, "mfu": 0.01, "peak_mem_bytes": 2**20,
        "step_time_breakdown_s": {"forward": 0.1}, "time_to_target_s": None, "world_size": 1}))
    (run / "config.toml").write_text(QUICK)
    mlp = {"model": {"name": "mlp", "width": 128}, "data": {"source": "synthetic", "seq_len": 8},
           "train": {"batch_size": 256, "precision": "fp32"}}
    bench = _file(tmp_path / "b1" / "results.json", _w("mlp_tiny", 4278.0, config=mlp))
    assert main(["compare", str(bench), str(run)]) == 2
    err = capsys.readouterr().err
    assert "different workloads" in err and "model.name 'mlp' vs 'ts_transformer'" in err
    assert "train.batch_size 256 vs 64" in err and "version" not in err
    (row,) = compare_results(validate_results(json.loads(bench.read_text())),
                             make_results("run", {}, [_w("quickstart", 80.0, version=None, config={})]))
    assert "version_mismatch" in row  # no config on one side: the versions still tell them apart


@pytest.mark.parametrize(("throughput", "words"), [
    ({"median": 1e308}, "throughput.median = 1e+308 lies outside [min 900.0, max 1010.0]"),
    ({"median": 800.0}, "throughput.median = 800.0 lies outside [min 900.0, max 1010.0]"),
    ({"min": 1020.0, "median": 1015.0}, "throughput.min = 1020.0 is above throughput.max = 1010.0"),
])
def test_a_median_outside_its_own_range_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   throughput: dict, words: str) -> None:
    good = _file(tmp_path / "good" / "results.json", _w("mlp_tiny", 1000.0, mn=900.0, mx=1010.0))
    w = _w("mlp_tiny", 1000.0, mn=900.0, mx=1010.0)
    w["throughput"].update(throughput)
    bad = _file(tmp_path / "bad" / "results.json", w)
    for args in (("compare", str(good), str(bad)), ("compare", str(bad), str(good), "--json"), ("report", str(bad))):
        assert main(list(args)) == 2
        out = capsys.readouterr()
        lines = out.err.strip().splitlines()
        assert len(lines) == 1 and f"{bad}: workloads[0] (mlp_tiny): {words}" in lines[0], out.err
        assert "within noise" not in out.out and "faster" not in out.out
    assert not (bad.parent / "report.html").exists()
    assert main(["compare", str(good), str(good)]) == 0  # a median inside its range (and min = median) compares
    w["throughput"].update(median=-10.0, min=9.0, max=11.0)  # a negative figure: named as such by the range check
    assert main(["compare", str(_file(tmp_path / "neg" / "results.json", w)), str(good)]) == 2
    assert "throughput.median = -10.0 is impossible (below 0)" in capsys.readouterr().err


def test_a_scaling_point_with_a_median_outside_its_range_is_refused() -> None:
    point = {"workload": "mlp_tiny", "strategy": "none", "scaling": "baseline", "world_size": 1, "per_rank_batch": 8,
             "global_batch": 8, "speedup": 1.0, "efficiency": 1.0, "exposed_comm_fraction": None,
             "oversubscribed": False,
             "throughput": {"unit": "samples/s", "median": 50.0, "min": 90.0, "max": 110.0, "cv": 0.1, "n": 3}}
    scaling = {"points": [point], "pinning": {}, "repeats": 3}
    with pytest.raises(ResultsError, match=r"scaling.points\[0\] .*throughput.median = 50.0 lies outside"):
        make_results("world", {}, [_w("mlp_tiny", 100.0)], scaling=scaling)
    point["throughput"].update(median=100.0)
    assert make_results("world", {}, [_w("mlp_tiny", 100.0)], scaling=scaling)["scaling"]["points"][0]
