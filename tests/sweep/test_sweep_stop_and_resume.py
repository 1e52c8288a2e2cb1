"""Points trained alone resume after a kill, and SIGTERM stops a sweep as Ctrl-C does (audit 10, F1 and F11).

Before: a point trained one by one (`--pack 1`, a lone point, an unpackable class) left `runs/<id>/` holding an
unfinished run when the sweep was stopped, and "run the same command again to resume it" failed with exit
status 2 ("holds an earlier run's metrics.jsonl ... use --overwrite", an option `stride sweep` does not have).
SIGTERM ended a sweep without a line, without the report of its finished points, by the signal.
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
from sweep_fixtures import mlp_toml

import stride.sweep.runner
from stride.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def _ids(out: Path) -> list[str]:
    return [p["id"] for p in json.loads((out / "sweep.json").read_text())["points"]]


def test_an_unfinished_attempt_of_a_point_trained_alone_is_trained_again(config, tmp_path, capsys) -> None:
    """What a kill leaves of a point trained alone: its run folder with config.toml and metrics.jsonl but no
    summary.json, and no point file. The same command trains it again, over that folder, to the same result."""
    out = tmp_path / "s"
    args = ["sweep", str(config), "--grid", "train.seed=0,1", "--pack", "1", "--out", str(out)]
    assert main(args) == 0
    pid = _ids(out)[1]
    first = json.loads((out / "points" / f"{pid}.json").read_text())
    (out / "points" / f"{pid}.json").unlink()
    (out / "points" / f"{pid}.state.pt").unlink()
    (out / "runs" / pid / "summary.json").unlink()
    assert (out / "runs" / pid / "metrics.jsonl").stat().st_size > 0  # the unfinished attempt
    capsys.readouterr()
    assert main(args) == 0  # was 2: "holds an earlier run's metrics.jsonl (a run that did not finish)"
    err = capsys.readouterr().err
    assert "resuming: 1 of 2 points already finished" in err and "trained 1 point(s)" in err
    again = json.loads((out / "points" / f"{pid}.json").read_text())
    assert again["mode"] == "solo" and again["summary"]["steps"] == 4
    assert again["summary"]["params_sha256"] == first["summary"]["params_sha256"]  # the same training, again
    assert (out / "runs" / pid / "summary.json").is_file()
    other = _ids(out)[0]  # trained once, in the first run: the attempt's records were replaced, not appended to
    lines = [len((out / "runs" / i / "metrics.jsonl").read_text().splitlines()) for i in (pid, other)]
    assert lines[0] == lines[1], lines


def test_sigterm_stops_between_steps_with_the_stop_line_and_the_report(config, tmp_path, monkeypatch,
                                                                        capfd) -> None:
    """SIGTERM while the second pack trains: acknowledged at once, acted on after the step, the first pack's
    points kept, the report written, exit status 130."""
    def not_taken(signum, frame):  # what the old code let happen (the default action killed the sweep)
        raise AssertionError("SIGTERM reached the default handler: the sweep did not take it")

    previous = signal.signal(signal.SIGTERM, not_taken)
    real = stride.sweep.runner.run_job

    def term_in_second_pack(job, on_point=None, **kw):
        if job.index > 0:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(job, on_point, **kw)

    monkeypatch.setattr(stride.sweep.runner, "run_job", term_in_second_pack)
    out = tmp_path / "s"
    args = ["sweep", str(config), "--grid", "optim.lr=1e-3,2e-3", "--grid", "train.seed=0..1", "--pack", "2",
            "--out", str(out)]
    try:
        rc = main(args)
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capfd.readouterr().err.strip().splitlines()  # capfd: the acknowledgement is written to fd 2 directly
    assert rc == 130, err
    assert "stride sweep: SIGTERM received; stopping at the end of this step" in "\n".join(err)
    assert err[-1] == (f"stride sweep: stopped (SIGTERM): 2 of 4 points finished and are kept in {out}; run the same "
                       "command again to resume it")
    assert len(list((out / "points").glob("*.json"))) == 2
    assert (out / "summary.md").read_text().startswith("# stride sweep: 2 of 4 points")
    assert signal.getsignal(signal.SIGTERM) is previous  # the sweep's handler is gone again
    monkeypatch.setattr(stride.sweep.runner, "run_job", real)
    assert main(args) == 0
    assert "resuming: 2 of 4 points already finished" in capfd.readouterr().err


@pytest.mark.slow
def test_sigterm_to_a_sweep_of_points_trained_alone_then_the_same_command_resumes(tmp_path: Path) -> None:
    """A real SIGTERM (as `timeout` or a batch scheduler sends it) while the second of three points trains alone
    (`--pack 1`): the stop line, exit status 130, the report; then the same command trains the two unfinished
    points, the second over the attempt the stop left in runs/<id>."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(mlp_toml(4, 4, "log_every = 1"))
    out = tmp_path / "s"
    cmd = [sys.executable, "-m", "stride", "sweep", str(cfg), "--grid", "train.steps=4,400,5", "--pack", "1",
           "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 240
        second = None
        while time.time() < deadline and proc.poll() is None:
            if second is None and (out / "sweep.json").is_file():
                second = out / "runs" / _ids(out)[1] / "metrics.jsonl"
            if second is not None and second.is_file() and second.stat().st_size > 0:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert "stride sweep: SIGTERM received; stopping at the end of this step" in err and "Traceback" not in err
    assert lines[-1] == (f"stride sweep: stopped (SIGTERM): 1 of 3 points finished and are kept in {out}; run the "
                         "same command again to resume it")
    assert (out / "report.html").is_file() and (out / "summary.md").is_file()
    ids = _ids(out)
    assert not (out / "runs" / ids[1] / "summary.json").exists()  # the unfinished attempt
    done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "resuming: 1 of 3 points already finished" in done.stderr and "trained 2 point(s)" in done.stderr
    steps = [json.loads((out / "points" / f"{i}.json").read_text())["summary"]["steps"] for i in ids]
    assert steps == [4, 400, 5]
