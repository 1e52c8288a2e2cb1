"""A process stopped between its final checkpoint and summary.json: the rerun writes the summary and says so.

Before: the rerun found the checkpoint at the last step, called the run finished ("it has no summary.json: it
stopped while writing it") and no summary.json was ever written; `stride report`/`compare` found no run there.
Now the final checkpoint's meta.json records the summary as it stood at the save, and the rerun of the same
command writes it (one line on stderr, nothing trained).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ckpt_helpers import REPO, cli, fit, write_config

from stride.train.trainer import HOLD_BEFORE_SUMMARY

OVERRIDES = ("train.val_every=8",)
# the figures the training computed: the rerun's summary must carry them as the uninterrupted run's
SAME = ("steps", "start_step", "status", "final_train_loss", "final_val_loss", "params_sha256", "config_hash",
        "params", "skipped_steps", "timed_steps", "world_size")


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_a_kill_before_summary_json_is_finished_by_the_rerun(tmp_path: Path) -> None:
    config = write_config(tmp_path / "cfg.toml", *OVERRIDES)
    ref = cli(config, tmp_path / "ref")
    assert ref.returncode == 0, ref.stderr

    out, hold = tmp_path / "run", tmp_path / "holding"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", HOLD_BEFORE_SUMMARY: str(hold)}
    proc = subprocess.Popen([sys.executable, "-m", "stride", "train", str(config), "--out", str(out), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    try:
        deadline = time.monotonic() + 180
        while not hold.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hold.exists(), f"the run never reached the hold (exit {proc.poll()})"
        time.sleep(0.1)  # the pid is written whole
        assert int(hold.read_text()) == proc.pid
        # in the window: the final checkpoint committed, summary.json not written
        assert (out / "checkpoints" / "step_00000024" / "manifest.json").is_file()
        assert not (out / "summary.json").exists()
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    metrics = (out / "metrics.jsonl").read_bytes()

    rerun = cli(config, out)
    assert rerun.returncode == 0, rerun.stderr
    said = [line for line in rerun.stderr.splitlines() if "without summary.json" in line]
    assert len(said) == 1 and "wrote summary.json from step_00000024/meta.json" in said[0], rerun.stderr
    assert "nothing trained" in said[0]
    got, want = _summary(out), _summary(tmp_path / "ref")
    assert {k: got[k] for k in SAME} == {k: want[k] for k in SAME}
    assert got["checkpoint"]["saved_steps"] == want["checkpoint"]["saved_steps"] == [3, 6, 9, 12, 15, 18, 21, 24]
    assert got["checkpoint_count"] == want["checkpoint_count"]
    assert "summary_note" in got and "summary_note" not in want
    # key by key: every key of the uninterrupted run's (the system sampler's `system` too: it was missing), and the
    # marks of a recovered one
    assert set(got) == set(want) | {"summary_note", "recorded_at_final_save"}
    assert got["recorded_at_final_save"] == ["system"] and got["system"]["samples"] > 0
    assert (out / "metrics.jsonl").read_bytes() == metrics  # nothing trained, nothing logged

    # and the run is now an ordinary finished one: the next rerun changes nothing
    again = cli(config, out)
    assert again.returncode == 0 and "holds this run, finished at step 24:" in again.stderr, again.stderr
    assert _summary(out) == got


def test_a_lost_summary_json_is_written_from_the_final_checkpoint(tmp_path: Path) -> None:
    """In process: summary.json removed after the run (as if never written) comes back from the final checkpoint,
    with the figures the run computed; a run with summary.json and a checkpoint without a record are left alone."""
    out = tmp_path / "run"
    first = fit(out, *OVERRIDES)
    (out / "summary.json").unlink()
    again = fit(out, *OVERRIDES)
    assert (out / "summary.json").is_file()
    written = _summary(out)
    assert {k: written[k] for k in SAME} == {k: first[k] for k in SAME} == {k: again[k] for k in SAME}
    assert written["samples_per_s"] == first["samples_per_s"]  # the training process's own figure, not re-measured
    assert written["checkpoint"]["saved_steps"] == first["checkpoint"]["saved_steps"]


def test_a_recovered_summary_has_the_keys_of_the_callbacks_after_the_checkpoint(tmp_path: Path) -> None:
    """The system sampler's `system` and a sink's key (TensorBoard's tensorboard_dir) are added after the final
    checkpoint recorded the summary: a recovered summary.json lacked them. Now the record holds them as those
    callbacks had them at the save, named in `recorded_at_final_save`."""
    out = tmp_path / "run"
    ov = (*OVERRIDES, "metrics.system_sample_s=0.05", "metrics.tensorboard=true")
    first = fit(out, *ov)
    (out / "summary.json").unlink()
    fit(out, *ov)
    written = _summary(out)
    assert set(written) == set(first) | {"summary_note", "recorded_at_final_save"}
    assert written["recorded_at_final_save"] == ["system", "tensorboard_dir"]
    assert written["tensorboard_dir"] == first["tensorboard_dir"] == str(out / "tensorboard")
    # the samples up to the final save: as many as the run's, less those taken during and after that save
    assert 0 < written["system"]["samples"] <= first["system"]["samples"]
    assert written["system"]["rss_peak_bytes"] <= first["system"]["rss_peak_bytes"]
    assert written["system"]["nvml"] == first["system"]["nvml"]
    assert "(system, tensorboard_dir) are as those callbacks had them at the save" in written["summary_note"]


def test_a_target_stopped_run_without_summary_json_is_not_trained_on(tmp_path: Path) -> None:
    """A run that reached train.target_val_loss at step 8 (of 24) and lost summary.json: its final checkpoint says it
    ended there, so the rerun writes the summary of step 8 (before: it resumed at step 8 and trained on)."""
    out = tmp_path / "run"
    ov = (*OVERRIDES, "train.target_val_loss=100")  # reached at the first validation, step 8
    first = fit(out, *ov)
    assert first["steps"] == 8 and first["time_to_target_s"] is not None
    (out / "summary.json").unlink()
    lines = (out / "metrics.jsonl").read_bytes()
    again = fit(out, *ov)
    written = _summary(out)
    assert written["steps"] == again["steps"] == 8 and written["params_sha256"] == first["params_sha256"]
    assert written["time_to_target_s"] == first["time_to_target_s"]
    assert (out / "metrics.jsonl").read_bytes() == lines


def test_a_target_reached_on_a_checkpoint_step_still_records_the_summary(tmp_path: Path) -> None:
    """The target reached at step 4, a periodic checkpoint's step (every = 4): the periodic save there left out the
    final save, so no summary was recorded and a rerun without summary.json trained on to step 8 (review of the
    session's diff). The step's one save is now the final one, with the summary."""
    out = tmp_path / "run"
    ov = ("train.val_every=4", "checkpoint.every=4", "train.target_val_loss=100")
    first = fit(out, *ov)
    assert first["steps"] == 4 and first["checkpoint"]["saved_steps"] == [4]
    (out / "summary.json").unlink()
    again = fit(out, *ov)
    written = _summary(out)
    assert written["steps"] == again["steps"] == 4 and written["params_sha256"] == first["params_sha256"]


def test_the_note_says_what_the_record_holds() -> None:
    """A record of an older stride (no recorded_at_final_save) lacks the later callbacks' keys; one with the list
    names them; an empty list (no callback after the checkpoint's adds a key) lacks nothing."""
    from stride.checkpoint.rerun import LATER_KEYS, recorded_summary

    folder = Path("step_00000024")

    def note(**extra: object) -> str:
        rec = recorded_summary({"step": 24, "summary": {"steps": 24, **extra}}, folder)
        assert rec is not None
        return rec["summary_note"]

    assert "is missing: `system`" in note()
    assert "missing" not in note(**{LATER_KEYS: []}) and "callbacks after" not in note(**{LATER_KEYS: []})
    assert "(system, wandb_run_id) are as those callbacks had them" in note(**{LATER_KEYS: ["system", "wandb_run_id"]})
