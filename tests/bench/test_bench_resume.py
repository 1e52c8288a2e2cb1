"""A sweep writes results.json after every variant, survives SIGKILL/SIGTERM, and resumes without redoing work.

The reference is an uninterrupted sweep of the same command: a resumed sweep's deterministic figures
(configs, losses, parameter hashes in deterministic mode, the tradeoff matrix's loss and stability
columns) must equal it; measured times may differ, the entries kept from before the stop must not.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stride.bench.journal import ResultsJournal, ResumeError
from stride.bench.progress import SweepProgress
from stride.bench.results import load_results
from stride.cli.main import main

VARIANTS = ["baseline", "ac_full", "grad_accum4"]
SMALL = ["data.n_steps=1024", "data.n_assets=4", "train.steps=16", "train.val_every=16", "train.batch_size=32"]
CMD = [sys.executable, "-m", "stride", "bench", "--sweep", "tradeoffs", "--workloads", "mlp_tiny",
       "--variants", *VARIANTS, *[a for s in SMALL for a in ("--set", s)], "--no-report"]
DETERMINISTIC = ("name", "version", "config", "config_hash", "steps", "final_train_loss", "final_val_loss",
                 "params_sha256", "repeat_params_sha256", "saved_activation_bytes", "skipped_steps", "params")
MATRIX_DETERMINISTIC = ("final_val_loss", "val_loss_delta", "skipped_steps", "bitwise_repeatable", "activation_ratio")


def _done(path: Path) -> int:
    if not path.is_file():
        return 0
    res = json.loads(path.read_text())  # replaced atomically: never read half-written
    return len(res["workloads"])


def _run(out: Path, stop_after: int | None = None, sig: int = signal.SIGKILL) -> subprocess.CompletedProcess:
    """The sweep in its own process; with `stop_after`, send `sig` once that many variants are in results.json."""
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen([*CMD, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    if stop_after is not None:
        deadline = time.monotonic() + 600
        while _done(out / "results.json") < stop_after and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, f"the sweep ended before {stop_after} variants were in:\n{proc.stderr.read()}"
        proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.slow
def test_stopped_sweep_keeps_results_and_resumes(tmp_path) -> None:
    out = tmp_path / "sweep"
    r1 = _run(out, stop_after=1, sig=signal.SIGKILL)
    assert r1.returncode == -signal.SIGKILL
    first = load_results(out / "results.json")  # valid after a SIGKILL: written atomically after each variant
    n1 = len(first["workloads"])
    assert 1 <= n1 < len(VARIANTS) and first["partial"]["done"] == n1
    assert [w["name"] for w in first["workloads"]] == [f"mlp_tiny+{v}" for v in VARIANTS[:n1]]
    assert list(first["tradeoffs"]["mlp_tiny"]) == VARIANTS[:n1]  # the summary covers what finished

    r2 = _run(out, stop_after=n1 + 1, sig=signal.SIGTERM)
    assert r2.returncode == 130, r2.stderr
    assert "stopped (SIGTERM)" in r2.stderr and f"rerun with --out {out}" in r2.stderr
    second = load_results(out / "results.json")
    n2 = len(second["workloads"])
    assert n1 < n2 < len(VARIANTS)
    assert second["workloads"][:n1] == first["workloads"]  # kept as measured, not run again

    r3 = _run(out)
    assert r3.returncode == 0, r3.stderr
    for v in VARIANTS[:n2]:
        assert f"mlp_tiny+{v}: already in results.json with the same config, kept" in r3.stderr
    final = load_results(out / "results.json")
    assert "partial" not in final and final["workloads"][:n2] == second["workloads"]

    ref_dir = tmp_path / "uninterrupted"
    assert _run(ref_dir).returncode == 0
    ref = load_results(ref_dir / "results.json")
    assert [w["name"] for w in final["workloads"]] == [w["name"] for w in ref["workloads"]]
    for got, want in zip(final["workloads"], ref["workloads"], strict=True):
        assert {k: got.get(k) for k in DETERMINISTIC} == {k: want.get(k) for k in DETERMINISTIC}, got["name"]
    for v in VARIANTS:
        got, want = final["tradeoffs"]["mlp_tiny"][v], ref["tradeoffs"]["mlp_tiny"][v]
        assert {k: got[k] for k in MATRIX_DETERMINISTIC} == {k: want[k] for k in MATRIX_DETERMINISTIC}, v

    # the same --out with another config is refused before anything runs, naming the difference
    argv = ["bench", "--sweep", "tradeoffs", "--workloads", "mlp_tiny", "--variants", *VARIANTS,
            *[a for s in SMALL for a in ("--set", s)], "--set", "train.steps=8", "--no-report", "--out", str(out)]
    assert main(argv) == 2
    assert load_results(out / "results.json") == final


def _entry(name: str, steps: int = 10) -> dict:
    return {"name": name, "version": 1, "config": {"train": {"steps": steps}}, "config_hash": f"h{steps}",
            "throughput": {"unit": "samples/s", "median": 10.0, "min": 9.0, "max": 11.0, "cv": 0.1, "n": 3},
            "mfu": None, "peak_mem_bytes": 1, "step_time_breakdown_s": {}, "time_to_target_s": None}


ENV = {"hostname": "h", "cpu_model": "cpu", "cpu_count": 2, "gpus": [], "git_commit": "abc",
       "packages": {"torch": "2", "stride": "0.1"}}


def test_journal_writes_partial_results_and_refuses_what_would_mix(tmp_path) -> None:
    j = ResultsJournal(tmp_path, "batch-sweep", ENV, ["m+bs1", "m+bs2"])
    j.add(_entry("m+bs1"))
    res = load_results(tmp_path / "results.json")
    assert res["partial"] == {"done": 1, "planned": 2, "pending": ["m+bs2"]}
    again = ResultsJournal(tmp_path, "batch-sweep", ENV, ["m+bs1", "m+bs2"])
    assert again.finished("m+bs1", "h10", 1, {"train": {"steps": 10}})["throughput"]["median"] == 10.0
    assert again.finished("m+bs2", "h10", 1, {}) is None
    with pytest.raises(ResumeError, match=r"m\+bs1 was measured with another config \(train.steps: 10 -> 20\)"):
        again.finished("m+bs1", "h20", 1, {"train": {"steps": 20}})
    with pytest.raises(ResumeError, match="workload version 1 -> 2"):
        again.finished("m+bs1", "h10", 2, {"train": {"steps": 10}})
    with pytest.raises(ResumeError, match=r"holds m\+bs1, which this sweep does not plan"):
        ResultsJournal(tmp_path, "batch-sweep", ENV, ["m+bs4"])
    with pytest.raises(ResumeError, match="cpu_model 'cpu', this run has 'other'"):
        ResultsJournal(tmp_path, "batch-sweep", {**ENV, "cpu_model": "other"}, ["m+bs1"])
    with pytest.raises(ResumeError, match="torch 2, this run has 3"):
        ResultsJournal(tmp_path, "batch-sweep", {**ENV, "packages": {"torch": "3", "stride": "0.1"}}, ["m+bs1"])
    with pytest.raises(ResumeError, match="holds a 'batch-sweep' run, this is 'tradeoffs-sweep'"):
        ResultsJournal(tmp_path, "tradeoffs-sweep", ENV, ["m+bs1"])
    (tmp_path / "results.json").write_text("{cut")
    with pytest.raises(ResumeError, match="not valid JSON.*use a new --out"):
        ResultsJournal(tmp_path, "batch-sweep", ENV, ["m+bs1"])


def test_progress_log_lines_carry_steps_and_eta(capsys) -> None:
    from rich.console import Console

    p = SweepProgress([("w+a", 4), ("w+b", 400), ("v", 4)], Console(stderr=True, force_terminal=False), live=False,
                      heartbeat_s=0.0)
    p.start("w+a")
    p.step(2)
    p.finish("w+a", _entry("w+a"))
    err = capsys.readouterr().err
    assert "[1/3] w+a: 4 steps ...; sweep ETA unknown" in err  # nothing measured yet
    assert "w+a: step 2/4" in err and "ETA" in err
    assert "[1/3] w+a done in" in err and "10 samples/s" in err and "results.json updated" in err
    p.pace["w"], p.measured_s = 0.5, 3.0  # as if w+a took 3 s for its 4 steps... at 0.5 s per step
    assert p.eta_s() == pytest.approx(0.5 * 400 + 3.0)  # w+b at w's pace; v (not run yet) at the mean variant time
    p.start("w+b")
    p.step(100)
    assert p.eta_s() == pytest.approx(0.5 * 300 + 3.0)
    p.finish("w+b", _entry("w+b"))
    p.start("v")
    p.finish("v", _entry("v"))
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("[3/3] v done in") and last.endswith("sweep done")


def test_journal_writes_a_name_planned_twice_once(tmp_path) -> None:
    """A name planned twice (`--workloads mlp_tiny mlp_tiny`) was written twice: a results.json that `stride report`
    and `stride compare` refuse ("listed twice")."""
    from stride.report.inputs import resolve

    j = ResultsJournal(tmp_path, "custom", ENV, ["m", "m", "n"])
    j.add(_entry("m"))
    res = j.results()
    assert [w["name"] for w in res["workloads"]] == ["m"]
    assert res["partial"] == {"done": 1, "planned": 2, "pending": ["n"]}
    j.add(_entry("n"))
    assert [w["name"] for w in load_results(tmp_path / "results.json")["workloads"]] == ["m", "n"]
    assert [w["name"] for w in resolve(tmp_path)[0]["workloads"]] == ["m", "n"]
