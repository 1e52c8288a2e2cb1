"""Issue 16, item 1: a rerun on a folder that holds a run continues it, extends it, says it is finished, or refuses,
and never rewrites what the earlier run wrote.

Before: rerunning a finished run "resumed" at its last step, trained nothing and wrote a summary of nothing over
the real one (loss NaN, no throughput); a resume refused for another config had already rewritten config.toml;
without checkpoints a rerun appended to metrics.jsonl and replaced summary.json.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ckpt_helpers import REPO, Crash, CrashAt, ckpt_config, reference_sha, write_config

from stride.checkpoint import ConfigMismatchError, RunExistsError
from stride.checkpoint.errors import LastCheckpointUnusableError
from stride.launch.repro import reproduce
from stride.train.callbacks import Callback
from stride.train.schedule import lr_factor
from stride.train.trainer import Trainer


def folder_bytes(root: Path) -> dict[str, str]:
    """Every file under `root` (the lock file too) by relative path: its sha256."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def run(out: Path, *overrides: str, **kw):
    import torch

    try:
        return Trainer(config=ckpt_config(*overrides), out=out, **kw).fit()
    finally:
        torch.use_deterministic_algorithms(False)


def cli_train(*args: str) -> tuple[int, str, str]:
    """`stride train ARGS` in this process (a subprocess would add seconds of imports): exit status, stdout, stderr."""
    import torch

    from stride.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["train", *args, "--no-progress"])
    finally:
        torch.use_deterministic_algorithms(False)
    return rc, out.getvalue(), err.getvalue()


def test_a_finished_run_rerun_trains_nothing_and_changes_no_byte(tmp_path: Path) -> None:
    """Rerun in the API, then as the issue's command line (`stride train CONFIG --out R` again): the run says it
    is finished, exits 0, shows its own summary, and no byte in R changes (so `stride repro R` sees the run as
    written: repro of a run folder is tested in test_an_extension_follows_its_new_schedule_and_repro_replays_it)."""
    out = tmp_path / "R"
    first = run(out)
    before = folder_bytes(out)
    assert ".stride-lock" in before and "summary.json" in before
    again = run(out)
    assert again.already_finished and "finished at step 24" in again.already_finished
    assert again.summary == first.summary and again.history == []
    assert folder_bytes(out) == before
    rc, stdout, stderr = cli_train(str(write_config(tmp_path / "run.toml")), "--out", str(out))
    assert rc == 0, stderr[-3000:]
    assert "holds this run, finished at step 24" in stderr and "nothing trained" in stderr
    assert "final train loss" in stdout and "nan" not in stdout.lower()  # the run's own summary
    assert folder_bytes(out) == before


def test_a_refused_resume_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(Crash):
        run(out, callbacks=[CrashAt(4)])  # checkpoint at step 3, metrics.jsonl to step 4
    before = folder_bytes(out)
    with pytest.raises(ConfigMismatchError, match="optim.lr: 0.001 \\(checkpoint\\) -> 0.0005 \\(now\\)"):
        run(out, "optim.lr=0.0005", "train.steps=40")
    assert folder_bytes(out) == before  # config.toml still the first run's, the lock file's content too
    assert 'steps = 24' in (out / "config.toml").read_text()


def test_a_finished_run_extends_to_more_steps_exactly(tmp_path: Path) -> None:
    """A constant schedule: 24 steps, then extended to 36, ends where an uninterrupted 36-step run does."""
    const = ("optim.schedule=constant", "metrics.skip_steps=2")
    out = tmp_path / "run"
    run(out, *const)
    config_before = (out / "config.toml").read_text()
    s = run(out, *const, "train.steps=36").summary
    assert s["params_sha256"] == reference_sha(*const, "train.steps=36")
    assert (s["steps"], s["start_step"]) == (36, 24)
    assert s["timed_steps"] == 10  # steps 25..36 less this process's 2 warm-up steps
    assert s["samples_per_s"] and s["final_train_loss"] == s["final_train_loss"]  # timed, and not NaN
    assert s["checkpoint"]["resumed_from"] == "step_00000024" and s["checkpoint"]["extended_from"] == [24]
    assert "steps = 24" in config_before and "steps = 36" in (out / "config.toml").read_text()
    assert [r["step"] for r in metrics(out) if "loss" in r] == list(range(1, 37))  # one line per step, in order


class FailingStep(Callback):
    """The step fails before its update (an out-of-memory step, a layout whose collectives fail)."""

    def before_optimizer_step(self, trainer, loss, grad_norm) -> bool:
        raise Crash(f"step {trainer.step + 1} fails")


def test_a_resume_whose_first_step_fails_leaves_the_earlier_run_as_it_was(tmp_path: Path) -> None:
    """Audit 6: a resume that loaded its checkpoint but failed at its first step had already rewritten
    config.toml (with the failed run's config) and cut metrics.jsonl. Now both wait for the run's first own write.
    A later resume that trains still cuts the killed segment's records, so each step has one line."""
    def files(root: Path) -> dict[str, str]:  # system.jsonl gains the failed attempt's samples (its cause, an OOM...)
        return {k: v for k, v in folder_bytes(root).items() if k != "system.jsonl"}

    out = tmp_path / "run"
    run(out)  # finished at step 24
    before = files(out)
    with pytest.raises(Crash, match="step 25 fails"):
        run(out, "train.steps=36", callbacks=[FailingStep()])
    assert files(out) == before  # config.toml still says 24 steps; summary and records as they were

    killed = tmp_path / "killed"
    with pytest.raises(Crash):
        run(killed, callbacks=[CrashAt(4)])  # checkpoint at step 3, records to step 4
    before = files(killed)
    with pytest.raises(Crash, match="step 4 fails"):
        run(killed, callbacks=[FailingStep()])
    assert files(killed) == before  # step 4's record is still there: nothing trained it again yet
    run(killed)
    assert [r["step"] for r in metrics(killed) if "loss" in r] == list(range(1, 25))

    fresh = tmp_path / "fresh"  # a fresh run that fails at its first step still says what it was
    with pytest.raises(Crash, match="step 1 fails"):
        run(fresh, callbacks=[FailingStep()])
    assert {"config.toml", "env.json", ".stride-lock"} <= set(files(fresh))
    with pytest.raises(Crash, match="step 1 fails"):  # --overwrite of it: cleared, the new run's config at once
        run(fresh, "train.seed=2", callbacks=[FailingStep()], overwrite=True)
    assert "seed = 2" in (fresh / "config.toml").read_text()


class UpdateLr(Callback):
    """The learning rate each update uses (read just before the optimizer step), by step."""

    def __init__(self) -> None:
        self.lr: dict[int, float] = {}

    def before_optimizer_step(self, trainer, loss, grad_norm) -> bool:
        self.lr[trainer.step + 1] = float(trainer.optimizer.param_groups[0]["lr"])
        return True


def test_an_extension_follows_its_new_schedule_and_repro_replays_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(out)  # cosine over 24 steps: at its floor after step 24
    seen = UpdateLr()
    run(out, "train.steps=36", callbacks=[seen])
    cfg = ckpt_config("train.steps=36")
    assert min(seen.lr) == 25
    for step in (25, 30, 36):  # step s uses the schedule's factor at s - 1: the 36-step schedule's, from step 25 on
        assert seen.lr[step] == pytest.approx(cfg.optim.lr * lr_factor(step - 1, 36, cfg.optim), rel=1e-12)
    assert seen.lr[25] > 2 * cfg.optim.lr * lr_factor(24, 24, cfg.optim)  # not the 24-step schedule's floor
    rep = reproduce(out, tmp_path / "repro")  # trains 24 steps, then extends to 36, as the original was
    assert rep.params_match, rep.verdict


def test_steps_changes_that_cannot_continue_exactly_are_refused_and_write_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(Crash):
        run(out, callbacks=[CrashAt(10)])  # unfinished: newest checkpoint at step 9 of 24
    before = folder_bytes(out)
    with pytest.raises(ConfigMismatchError, match="stopped at step 9 of 24: finish it first"):
        run(out, "train.steps=36")
    assert folder_bytes(out) == before
    run(out)  # finishes the 24 steps
    before = folder_bytes(out)
    with pytest.raises(ConfigMismatchError, match="train.steps = 12 is below the 24 steps"):
        run(out, "train.steps=12")
    assert folder_bytes(out) == before


def test_an_extension_past_a_skipped_last_checkpoint_names_the_skipped_one(tmp_path: Path) -> None:
    """A finished run whose last checkpoint is corrupted cannot be extended exactly from the one before: the
    refusal names the skipped checkpoint and why, not `save_at_end = false` (which the run had on: the audit's
    case, where the message blamed a setting the run never used)."""
    out = tmp_path / "run"
    run(out)  # checkpoints at 21 and 24
    shard = next((out / "checkpoints" / "step_00000024").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    before = folder_bytes(out)
    with pytest.raises(ConfigMismatchError) as info:
        run(out, "train.steps=36")
    msg = str(info.value)
    assert "ended at step 24" in msg and "step_00000024: " in msg
    assert "was skipped; put back a valid step_00000024" in msg
    assert shard.name in msg and "save_at_end" not in msg
    # nothing in the config is wrong: the CLI calls it a checkpoint error (audit 21, L4)
    assert isinstance(info.value, LastCheckpointUnusableError) and info.value.label == "checkpoint error"
    rc, _, stderr = cli_train(str(write_config(tmp_path / "run.toml", "train.steps=36")), "--out", str(out))
    assert rc == 2 and stderr.startswith("stride train: checkpoint error: the run whose newest valid checkpoint")
    assert folder_bytes(out) == before
    out2 = tmp_path / "no_last"
    run(out2, "checkpoint.save_at_end=false", "train.steps=23")  # newest checkpoint at 21, ended at 23
    with pytest.raises(ConfigMismatchError, match="ended at step 23, after that checkpoint \\(checkpoint.save_at_end"
                                                  " = false\\)"):
        run(out2, "checkpoint.save_at_end=false", "train.steps=30")
    # the review's case: no checkpoint at the end (save_at_end off) and a corrupted one short of it; putting that
    # one back would not extend the run, so the message does not advise it
    shard = next((out2 / "checkpoints" / "step_00000021").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(ConfigMismatchError) as info:
        run(out2, "checkpoint.save_at_end=false", "train.steps=30")
    msg = str(info.value)
    assert "checkpoint.save_at_end = false; newer ones were skipped too: step_00000021" in msg
    assert "put back" not in msg and info.value.label == "config error"  # the run's own setting left no last one


def test_without_checkpoints_a_rerun_is_refused_until_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(out, "checkpoint.enabled=false", "train.steps=6")
    before = folder_bytes(out)
    with pytest.raises(RunExistsError, match="holds a finished run \\(summary.json, 6 steps\\).*--overwrite"):
        run(out, "checkpoint.enabled=false", "train.steps=6")
    assert folder_bytes(out) == before
    # with checkpoints on but none in the folder, nothing can continue it either
    with pytest.raises(RunExistsError, match="no valid checkpoint to continue it"):
        run(out, "train.steps=6")
    assert folder_bytes(out) == before
    s = run(out, "checkpoint.enabled=false", "train.steps=4", overwrite=True).summary
    assert s["steps"] == 4 and [r["step"] for r in metrics(out)] == [1, 2, 3, 4]  # the old lines are gone


def test_overwrite_through_the_cli_starts_over(tmp_path: Path) -> None:
    out = tmp_path / "R"
    old = run(out, "train.steps=6").summary
    rc, _, stderr = cli_train(str(write_config(tmp_path / "run.toml", "train.steps=6")), "--out", str(out),
                              "--overwrite")
    assert rc == 0, stderr[-3000:]
    assert "finished" not in stderr and "resuming" not in stderr  # trained from step 0
    new = json.loads((out / "summary.json").read_text())
    assert new["start_step"] == 0 and new["checkpoint"]["resumed_from"] is None
    assert new["params_sha256"] == old["params_sha256"]  # deterministic: the same run again


def _lock_free_elsewhere(folder: Path) -> bool:
    """Another process can take the run folder's lock now."""
    code = ("import sys; from pathlib import Path; from stride.files import run_lock; "
            "run_lock.acquire(Path(sys.argv[1]))")
    return subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, cwd=REPO,
                          timeout=120).returncode == 0


def test_a_trainer_that_raised_lets_its_run_folder_go_without_garbage_collection(tmp_path: Path) -> None:
    """fit() releases the folder in a `finally`: the crashed trainer is still referenced here, and the lock is free."""
    import torch

    out = tmp_path / "run"
    trainer = Trainer(config=ckpt_config("checkpoint.enabled=false", "metrics.system_sample_s=0.05"), out=out,
                      callbacks=[CrashAt(3)])
    try:
        with pytest.raises(Crash):
            trainer.fit()
    finally:
        torch.use_deterministic_algorithms(False)
    assert trainer.run_dir is not None and trainer.run_dir._metrics is None  # metrics.jsonl closed
    assert _lock_free_elsewhere(out)
    system = out / "system.jsonl"
    size = system.stat().st_size
    import time

    time.sleep(0.3)
    assert system.stat().st_size == size  # the system sampler stopped with the run (on_fit_abort)


def test_a_launcher_hold_that_saw_nothing_written_leaves_the_lock_file_as_it_was(tmp_path: Path) -> None:
    """`stride train --nproc N` holds the folder for its ranks; ranks that refused a resume leave it byte for byte."""
    from stride.files import run_lock

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / run_lock.LOCK_NAME).write_text('{"pid": 1, "host": "earlier", "since": 0}')
    before = folder_bytes(folder)
    with run_lock.held(folder):
        assert folder_bytes(folder) != before  # while held, it names this process
    assert folder_bytes(folder) == before
    with run_lock.held(folder):
        (folder / "summary.json").write_text("{}")
    assert json.loads((folder / run_lock.LOCK_NAME).read_text())["pid"] == os.getpid()
    fresh = tmp_path / "new"
    with run_lock.held(fresh):
        pass
    assert not fresh.exists()  # made for the job, nothing written: gone again


def test_overwrite_refuses_while_an_outside_checkpoint_dir_holds_steps(tmp_path: Path) -> None:
    """--overwrite clears the run folder, but checkpoints outside it would still be resumed by the new run:
    a step folder there refuses; a stray file named like one is not a checkpoint and does not."""
    from stride.checkpoint.rerun import open_run_folder
    from stride.config import load_config

    outside = tmp_path / "ckpts"
    cfg = load_config(write_config(tmp_path / "run.toml", f"checkpoint.dir={json.dumps(str(outside))}"))
    outside.mkdir()
    (outside / "step_00000004").write_text("not a folder")
    open_run_folder(cfg, tmp_path / "run", overwrite=True).close()
    (outside / "step_00000004").unlink()
    (outside / "step_00000004").mkdir()
    with pytest.raises(RunExistsError, match=f"{outside} \\(outside the run folder\\) holds checkpoints"):
        open_run_folder(cfg, tmp_path / "run", overwrite=True)


def test_overwrite_refuses_an_outside_checkpoint_dir_it_cannot_list(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """An outside checkpoint folder that exists but cannot be listed is not taken for empty: --overwrite
    would start over and a later resume could pick its checkpoints up. (Patched: root ignores chmod.)"""
    from stride.checkpoint.rerun import open_run_folder
    from stride.config import load_config
    from stride.files.step_names import UnreadableFolder

    outside = tmp_path / "ckpts"
    cfg = load_config(write_config(tmp_path / "run.toml", f"checkpoint.dir={json.dumps(str(outside))}"))
    open_run_folder(cfg, tmp_path / "run", overwrite=True).close()  # absent: holds nothing
    outside.mkdir()
    real_iterdir = Path.iterdir

    def denied(self: Path):  # type: ignore[no-untyped-def]
        if self == outside:
            raise PermissionError(13, "Permission denied", str(self))
        return real_iterdir(self)

    monkeypatch.setattr(Path, "iterdir", denied)
    with pytest.raises(UnreadableFolder, match=f"checkpoint folder {outside} cannot be listed \\(Permission denied\\)"):
        open_run_folder(cfg, tmp_path / "run", overwrite=True)
