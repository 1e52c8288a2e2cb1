"""The run's training clock continues across resumes: time to target and metrics.jsonl `time_s` are the run's.

Audit: killed with SIGKILL after step 60 and resumed, a run reported time_to_target_s 0.87 s against 3.46 s
uninterrupted (same params, same steps): only the resumed segment was counted, and `time_s` restarted at 0.
Each step here sleeps STEP_SLEEP_S, so a run's clock has a lower bound that no machine load can lower.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checkpoint"))
from ckpt_helpers import REPO, Crash, CrashAt, fit, write_config  # noqa: E402

from stride.train.callbacks import Callback  # noqa: E402
from stride.train.trainer import Trainer  # noqa: E402

STEPS, CRASH_AT, EVERY = 40, 30, 5
RESUMED_AT = 25  # the crash (before step 30's save) loses steps 26-30: the rerun starts at step 25's checkpoint
STEP_SLEEP_S = 0.02
# validation only at the last step, with a target every loss meets: time to target = the run's time at step 40
RUN = (f"train.steps={STEPS}", f"train.val_every={STEPS}", "train.val_batches=1", "train.target_val_loss=1e9",
       f"checkpoint.every={EVERY}")


class Slow(Callback):
    def on_step_end(self, trainer) -> None:
        time.sleep(STEP_SLEEP_S)


def times(run: Path) -> list[float]:
    return [json.loads(line)["time_s"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_time_to_target_of_a_crashed_and_resumed_run_is_the_runs(tmp_path: Path) -> None:
    whole = fit(tmp_path / "whole", *RUN, callbacks=[Slow()])
    with pytest.raises(Crash):
        fit(tmp_path / "resumed", *RUN, callbacks=[Slow(), CrashAt(CRASH_AT)])
    resumed = fit(tmp_path / "resumed", *RUN, callbacks=[Slow()])
    assert resumed["start_step"] == RESUMED_AT
    assert resumed["params_sha256"] == whole["params_sha256"]  # the same run
    # 40 steps of at least 20 ms each are on the run's clock (before: only the 15 steps of the last process)
    assert resumed["time_to_target_s"] >= STEPS * STEP_SLEEP_S
    ratio = resumed["time_to_target_s"] / whole["time_to_target_s"]
    assert 0.5 < ratio < 2.0, (resumed["time_to_target_s"], whole["time_to_target_s"])
    assert resumed["time_note"] is None
    assert resumed["run_time_s"] >= resumed["time_to_target_s"] > resumed["wall_time_s"]  # wall: this process's
    t = times(tmp_path / "resumed")
    assert len(t) == STEPS + 1  # every step and the validation; the crashed segment's steps 26-30 replaced
    assert t == sorted(t), t  # before: time_s fell back to 0.03 at step 26
    assert t[-1] == pytest.approx(resumed["time_to_target_s"])
    # steps 26-30 of the crashed process were trained and trained again: lost time, outside the goodput clock
    # (audit 13, L4: in no figure before); steps 26-29 each slept after their record, so at least 4 sleeps
    assert whole["lost_time_s"] == 0.0
    assert 4 * STEP_SLEEP_S <= resumed["lost_time_s"] < resumed["run_time_s"]


class LostTime(Callback):
    """What the trainer would save as lost time, seen at its first step."""

    def __init__(self) -> None:
        self.seen: list[float | None] = []

    def on_step_end(self, trainer) -> None:
        if not self.seen:
            self.seen.append(trainer.state_dict()["lost_time_s"])


def test_lost_time_adds_up_over_two_crashes_and_is_saved_with_the_checkpoints(tmp_path: Path) -> None:
    """Crashed at 30 (resumed at 25) and at 38 (resumed at 35): both dropped segments count, the first one carried
    by the checkpoints the second process wrote."""
    run, second, third = tmp_path / "run", LostTime(), LostTime()
    with pytest.raises(Crash):
        fit(run, *RUN, callbacks=[Slow(), CrashAt(CRASH_AT)])
    with pytest.raises(Crash):
        fit(run, *RUN, callbacks=[Slow(), second, CrashAt(38)])
    s = fit(run, *RUN, callbacks=[Slow(), third])
    assert s["start_step"] == 35
    (lost1,), (lost12,) = second.seen, third.seen
    assert lost1 >= 4 * STEP_SLEEP_S  # steps 26-30
    assert lost12 - lost1 >= 2 * STEP_SLEEP_S  # plus steps 36-38: the first segment came with checkpoint 35
    assert s["lost_time_s"] == lost12


def test_an_extended_run_continues_its_clock(tmp_path: Path) -> None:
    first = fit(tmp_path / "run", "train.steps=12", "train.val_every=0", callbacks=[Slow()])
    more = fit(tmp_path / "run", "train.steps=20", "train.val_every=0", callbacks=[Slow()])
    assert more["start_step"] == 12
    assert more["run_time_s"] >= first["run_time_s"] + 8 * STEP_SLEEP_S
    assert more["lost_time_s"] == 0.0  # nothing was trained twice
    t = times(tmp_path / "run")
    assert len(t) == 20 and t == sorted(t)


def test_a_checkpoint_without_the_clock_is_said_not_passed_off_as_the_runs(tmp_path: Path, monkeypatch) -> None:
    """A checkpoint of an older stride holds no training time: the summary says so; no segment time as the run's."""
    real = Trainer.state_dict

    def old_state_dict(self):  # what stride wrote before the clock was checkpointed
        state = real(self)
        state.pop("train_time_s")
        return state

    with monkeypatch.context() as m:
        m.setattr(Trainer, "state_dict", old_state_dict)
        with pytest.raises(Crash):
            fit(tmp_path / "run", *RUN, callbacks=[Slow(), CrashAt(CRASH_AT)])
    s = fit(tmp_path / "run", *RUN, callbacks=[Slow()])
    assert s["steps"] == STEPS and s["final_val_loss"] is not None
    assert s["time_to_target_s"] is None and s["run_time_s"] is None and s["lost_time_s"] is None
    assert "does not record the run's training time" in s["time_note"] and "step 25" in s["time_note"]
    assert "reached the target" in s["time_note"]

    from rich.console import Console

    from stride.report.summary_table import print_summary

    con = Console(record=True, width=300)
    print_summary(s, con)
    text = con.export_text()
    assert "unknown (see the note below)" in text and "does not record the run's training time" in text
    # its checkpoints keep saying so: a second resume does not take this process's time for the run's
    s2 = fit(tmp_path / "run", *RUN, "train.steps=44", callbacks=[Slow()])
    assert s2["start_step"] == STEPS and s2["time_to_target_s"] is None and s2["time_note"]


KILLER = textwrap.dedent("""
    import os, signal, sys, time
    from stride.train.trainer import Trainer
    from stride.cli.main import main

    real = Trainer._log_step
    kill_at = int(os.environ.get("KILL_AT_STEP", "0"))

    def slow_log_step(self, *args):
        real(self, *args)
        time.sleep(float(os.environ["STEP_SLEEP_S"]))
        if self.step == kill_at:
            self.run_dir.flush()
            os.kill(os.getpid(), signal.SIGKILL)  # kill -9: nothing of stride runs after this

    Trainer._log_step = slow_log_step
    raise SystemExit(main(sys.argv[1:]))
""")


@pytest.mark.slow
def test_kill_9_and_rerun_from_the_command_line(tmp_path: Path) -> None:
    """The audit's case through `stride train`: SIGKILL after step 30, the same command again."""
    cfg = write_config(tmp_path / "cfg.toml", *RUN)
    driver = tmp_path / "driver.py"
    driver.write_text(KILLER)

    def train(out: Path, kill_at: int = 0) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "KILL_AT_STEP": str(kill_at),
               "STEP_SLEEP_S": str(STEP_SLEEP_S)}
        return subprocess.run([sys.executable, str(driver), "train", str(cfg), "--out", str(out), "--no-progress"],
                              capture_output=True, text=True, timeout=180, cwd=REPO, env=env)

    r = train(tmp_path / "whole")
    assert r.returncode == 0, r.stderr[-2000:]
    r = train(tmp_path / "killed", kill_at=CRASH_AT)
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    r = train(tmp_path / "killed")
    assert r.returncode == 0, r.stderr[-2000:]
    whole = json.loads((tmp_path / "whole" / "summary.json").read_text())
    resumed = json.loads((tmp_path / "killed" / "summary.json").read_text())
    assert resumed["start_step"] == RESUMED_AT
    assert resumed["time_to_target_s"] >= STEPS * STEP_SLEEP_S
    assert 0.5 < resumed["time_to_target_s"] / whole["time_to_target_s"] < 2.0
    t = times(tmp_path / "killed")
    assert t == sorted(t), t
    assert re.search(rf"time to target\W+{resumed['time_to_target_s']:.2f} s", r.stdout), r.stdout
    # the killed process's steps 26-30 (each record flushed: the driver flushes before its kill) are lost time
    assert resumed["lost_time_s"] >= 4 * STEP_SLEEP_S
    assert re.search(rf"lost to crashes\W+{resumed['lost_time_s']:.2f} s", r.stdout), r.stdout
