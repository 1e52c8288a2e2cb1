"""A sweep's point files are checked when it resumes, and Ctrl-C stops a sweep in one line that says what it kept.

Before (audit 7, #10): a point file with `"summary": {}` was taken as finished and left out of the statistics
without a word ("6 of 6 points finished", "sd over 2 seeds"); with a NaN `final_val_loss` the sweep ended in an
AttributeError traceback from `statistics.stdev`; a point file that did not parse was trained again silently. Now
each is refused in one line naming the file and how to retrain the point (exit status 2), before anything trains.
(#8) Ctrl-C printed a traceback; now one line, exit status 130, finished points kept.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sweep_fixtures import mlp_toml, sweep_argv

import stride.sweep.runner
from stride.cli.main import main
from stride.cli.sweep import _log_best
from stride.sweep.store import point_problem

ROOT = Path(__file__).resolve().parents[2]


def first_point(out: Path) -> Path:
    return sorted((out / "points").glob("*.json"))[0]


def edit(path: Path, change) -> None:
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj))  # allow_nan: NaN as a hand edit would write it


def empty_summary(o):
    o["summary"] = {}


def nan_loss(o):
    o["summary"]["final_val_loss"] = float("nan")


def inf_time(o):
    o["summary"]["train_time_s"] = float("inf")


def other_values(o):
    o["values"]["optim.lr"] = 0.5


def bad_status(o):
    o["summary"]["status"] = "running"


def no_pack(o):
    del o["pack"]


@pytest.mark.parametrize(("change", "why"), [
    (empty_summary, "its summary is empty"),
    (nan_loss, "summary.final_val_loss is nan (stride writes a non-finite value as null)"),
    (inf_time, "summary.train_time_s is inf"),
    (other_values, "its values"),
    (bad_status, 'summary.status is "running", not one of done, target, diverged'),
    (no_pack, "its pack (index, size) is missing"),
])
def test_a_damaged_point_file_is_refused_before_training(change, why, config, copy, capsys) -> None:
    path = first_point(copy)
    edit(path, change)
    before = {p.name: p.read_bytes() for p in (copy / "points").iterdir()}
    rc = main(sweep_argv(config, copy))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"stride sweep: {path}: {why}"), err[0]
    assert err[0].endswith(f"not a finished point of this sweep (point files are written whole: it was edited or "
                           f"damaged); to train the point again, delete {copy}/points/{path.name} and "
                           f"{path.stem}.state.pt and run the same sweep command again")
    assert {p.name: p.read_bytes() for p in (copy / "points").iterdir()} == before  # nothing trained or rewritten


def test_a_point_file_that_does_not_parse_is_refused_not_retrained(config, copy, capsys) -> None:
    path = first_point(copy)
    path.write_text(path.read_text()[:40])
    rc = main(sweep_argv(config, copy))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"stride sweep: {path}: not valid JSON (")
    path.unlink()  # what the line says: delete the point's files, run the same command
    path.with_suffix(".state.pt").unlink()
    assert main(sweep_argv(config, copy)) == 0
    assert "resuming: 3 of 4 points already finished" in capsys.readouterr().err
    assert json.loads(path.read_text())["summary"]["status"] in ("done", "target")


def test_another_points_file_under_this_name_is_refused(config, copy, capsys) -> None:
    a, b = sorted((copy / "points").glob("*.json"))[:2]
    shutil.copyfile(b, a)
    assert main(sweep_argv(config, copy)) == 2
    assert f"{a}: its id is \"{b.stem}\", not '{a.stem}'" in capsys.readouterr().err


def test_point_problem_accepts_what_the_sweep_writes(finished) -> None:
    plan = json.loads((finished / "sweep.json").read_text())
    for p in plan["points"]:
        obj = json.loads((finished / "points" / f"{p['id']}.json").read_text())
        assert point_problem(obj, p["id"], p["values"]) is None
        diverged = dict(obj, summary=dict(obj["summary"], status="diverged", final_val_loss=None,
                                          final_train_loss=None, nonfinite_fields=["summary.final_val_loss"]))
        assert point_problem(diverged, p["id"], p["values"]) is None  # a diverged point as strict_json writes it


def test_the_best_configurations_leave_out_a_nan_loss(capsys) -> None:
    """The summary's statistics never see a non-finite loss (before: AttributeError in statistics.stdev)."""
    rs = [{"values": {"optim.lr": 1e-3, "train.seed": s}, "summary": {"final_val_loss": v, "status": "done"}}
          for s, v in enumerate([0.5, float("nan"), 0.7])]
    _log_best(rs)  # and says the third seed has no loss (audit 10, F2: how many seeds a mean is over, of how many)
    assert "0.6000 +- 0.1414 (sd over 2 of 3 seeds; 1 of 3 seeds without a final val loss)" in capsys.readouterr().err


def test_ctrl_c_keeps_the_finished_points_in_one_line(config, tmp_path, monkeypatch, capsys) -> None:
    real = stride.sweep.runner.run_job

    def first_pack_then_ctrl_c(job, on_point=None, **kw):
        if job.index > 0:
            raise KeyboardInterrupt
        return real(job, on_point, **kw)

    monkeypatch.setattr(stride.sweep.runner, "run_job", first_pack_then_ctrl_c)
    out = tmp_path / "s"
    assert main(sweep_argv(config, out)) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"stride sweep: stopped (interrupted): 2 of 4 points finished and are kept in {out}; run the "
                       "same command again to resume it")
    assert not any("Traceback" in line for line in err)
    assert len(list((out / "points").glob("*.json"))) == 2 and (out / "report.html").is_file()
    monkeypatch.setattr(stride.sweep.runner, "run_job", real)
    assert main(sweep_argv(config, out)) == 0
    assert "resuming: 2 of 4 points already finished" in capsys.readouterr().err


@pytest.mark.slow
def test_sigint_to_a_running_sweep(tmp_path: Path) -> None:
    """A real Ctrl-C (SIGINT to the process group, as a terminal sends it) while the sweep trains."""
    cfg = tmp_path / "long.toml"
    cfg.write_text(mlp_toml(100_000, 0))
    proc = subprocess.Popen([sys.executable, "-m", "stride", "sweep", str(cfg), "--grid", "train.seed=0..1",
                             "--pack", "2", "--out", str(tmp_path / "s")], cwd=ROOT, stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"},
                            # as from a terminal: a test run started in the background (`cmd &` in a script)
                            # ignores SIGINT, the sweep would inherit that and, as Python does, keep ignoring it
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509
    try:
        lines = []
        for line in proc.stderr:  # the pack trains once the one-by-one rate is measured
            lines.append(line)
            if "one by one, for the speed-up" in line:
                break
        os.killpg(proc.pid, signal.SIGINT)
        rest = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(lines) + rest
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("stride sweep: stopped (interrupted): no point of 2 finished; run the same "
                                            "command again to start it")
