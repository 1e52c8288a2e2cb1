"""After a Ctrl-C with no checkpoint to resume, the line says what the same command does next, and it is true.

First contact: `stride train ... --out runs/nockpt` stopped by Ctrl-C said "the same command starts over"; the same
command then refused with exit status 2 ("runs/nockpt holds an earlier run's metrics.jsonl ... --overwrite to
replace it"). Rerunning such a folder needs --overwrite (or another --out)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.cli.main import main
from stride.cli.train import interrupted_line
from stride.config import load_config

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--set", "data.n_steps=1024", "--set", "train.val_every=0", "--set", "metrics.log_every=1", "--no-progress"]


def test_the_interrupted_line_is_what_the_rerun_then_does(tmp_path: Path, monkeypatch, capsys) -> None:
    from stride.train.trainer import Trainer

    real = Trainer._validate

    def interrupt_at_step_3(self, tally):  # Ctrl-C arrives during step 3's bookkeeping
        if self.step == 3:
            raise KeyboardInterrupt
        return real(self, tally)

    out = tmp_path / "nockpt"
    command = ["train", str(ROOT / "configs" / "quickstart.toml"), "--set", "train.steps=6", *SMALL, "--out", str(out)]
    with monkeypatch.context() as m:
        m.setattr(Trainer, "_validate", interrupt_at_step_3)
        assert main(command) == 130
    err = capsys.readouterr().err
    assert (f"stride train: stopped (interrupted) after step 3 of 6; no checkpoint (checkpoint.enabled = false): "
            f"{out} keeps this run's partial metrics, so rerunning needs --overwrite (which replaces them) or another "
            "--out; --set checkpoint.enabled=true makes a Ctrl-C resumable") in err
    assert "the same command starts over" not in err
    assert main(command) == 2  # as the line said: the same command alone is refused ...
    assert "--overwrite to replace it" in capsys.readouterr().err
    assert main([*command, "--overwrite"]) == 0  # ... and --overwrite replaces the partial run


def _cfg(*overrides: str):
    return load_config(overrides=["train.steps=100", *overrides])


@pytest.mark.parametrize(("overrides", "out", "overwrite", "left", "then"), [
    ((), None, False, True, "no checkpoint (checkpoint.enabled = false): the same command starts over in a new run "
     "folder; --set checkpoint.enabled=true makes a Ctrl-C resumable"),
    ((), "runs/x", True, True, "no checkpoint (checkpoint.enabled = false): the same command starts over; --set "
     "checkpoint.enabled=true makes a Ctrl-C resumable"),  # its --overwrite replaces the partial run again
    ((), "runs/x", False, False, "no checkpoint (checkpoint.enabled = false): the same command starts over; --set "
     "checkpoint.enabled=true makes a Ctrl-C resumable"),  # stopped before its first metrics line: nothing refuses
    (("checkpoint.enabled=true", "checkpoint.resume=never"), "runs/x", False, True,
     "no resume (checkpoint.resume = never): runs/x keeps this run's partial metrics, so rerunning needs --overwrite "
     "(which replaces them) or another --out"),
    (("checkpoint.enabled=true",), "runs/x", False, True,
     "the same command resumes from the newest committed checkpoint, if any"),
])
def test_each_case_says_what_the_same_command_does(overrides, out, overwrite, left, then) -> None:
    assert interrupted_line(_cfg(*overrides), 7, out, overwrite, left) == (
        f"stopped (interrupted) after step 7 of 100; {then}")
