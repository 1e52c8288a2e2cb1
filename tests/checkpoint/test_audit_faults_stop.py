"""A stop signal (SIGTERM, a scheduler's preemption) that lands in a run's last step (outside audit of checkpoints
under faults, 2026-12-07).

Before: the last step's end saved the final checkpoint and exited 0 without summary.json, as for any other step. A
rerun then found a checkpoint at `train.steps`, said the run was finished ("it has no summary.json: it stopped while
writing it") and trained nothing, so the run never got its summary.json: `stride report`, `compare` and any script
waiting for it had nothing, although the run had trained every step. The window is the whole last step, its final
validation included (the longest part of many runs' last step). Now a stop in the last step finishes the run: the
final checkpoint, summary.json, exit 0.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from ckpt_helpers import ckpt_config, fit, reference_sha

from stride.checkpoint import verify
from stride.train.callbacks import Callback
from stride.train.trainer import Trainer


class SignalAtLog(Callback):
    """Sends this process `sig` when the step `at` is logged (before the checkpoint callback's step end: a signal
    that lands during the step's last part, its validation or its log line)."""

    def __init__(self, at: int, sig: int = signal.SIGTERM, key: str = "loss") -> None:
        self.at, self.sig, self.key = at, sig, key

    def on_log(self, trainer: Trainer, record: dict[str, Any]) -> None:
        if record.get("step") == self.at and self.key in record:
            os.kill(os.getpid(), self.sig)


@pytest.fixture
def restored_handlers():
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)}
    yield
    from stride.checkpoint import signals

    signals.PreemptionSignal().uninstall()
    for s, h in before.items():
        signal.signal(s, h)


def test_a_stop_in_the_last_step_finishes_the_run_with_its_summary(tmp_path: Path, capsys, restored_handlers) -> None:
    out = tmp_path / "run"
    s = fit(out, callbacks=[SignalAtLog(24)])  # 24 = train.steps: the signal lands in the last step
    err = capsys.readouterr().err
    assert "SIGTERM at step 24, the run's last step: finishing it" in err, err
    assert s["steps"] == 24 and s["status"] == "finished"
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["params_sha256"] == s["params_sha256"] == reference_sha()
    assert verify(out / "checkpoints" / "step_00000024").ok
    assert on_disk["checkpoint"]["saved_steps"][-1] == 24
    # the rerun finds it finished, with its summary
    try:
        again = Trainer(config=ckpt_config(), out=out).fit()
    finally:
        torch.use_deterministic_algorithms(False)
    assert again.already_finished and "it has no summary.json" not in again.already_finished
    assert again.summary["params_sha256"] == s["params_sha256"]


def test_a_stop_before_the_last_step_still_saves_and_exits_0(tmp_path: Path, restored_handlers) -> None:
    """The stop of any other step is unchanged: the final checkpoint of that step, exit 0, no summary.json."""
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as ex:
        fit(out, callbacks=[SignalAtLog(23)])
    assert ex.value.code == 0
    assert verify(out / "checkpoints" / "step_00000023").ok and not (out / "summary.json").exists()


def test_a_stop_in_the_step_that_reaches_the_target_finishes_the_run_there(tmp_path: Path, capsys,
                                                                           restored_handlers) -> None:
    """The trainer ends a run at the validation that reaches train.target_val_loss. Before, a stop signal in that
    step saved and exited 0 without summary.json, and the same command resumed and trained on to the next
    validation under the target (step 15 instead of 5: another run, another time to target)."""
    ov = ("train.val_every=5", "train.val_batches=2")
    first = fit(tmp_path / "probe", *ov, "checkpoint.enabled=false")
    val5 = next(r["val_loss"] for r in map(json.loads, (tmp_path / "probe" / "metrics.jsonl").read_text().splitlines())
                if r.get("step") == 5 and "val_loss" in r)
    assert first["steps"] == 24
    ov += (f"train.target_val_loss={val5 + 1e-7}",)  # reached at the first validation, step 5
    ref = fit(tmp_path / "ref", *ov)
    assert ref["steps"] == 5 and ref["time_to_target_s"] is not None
    capsys.readouterr()
    out = tmp_path / "run"
    s = fit(out, *ov, callbacks=[SignalAtLog(5, key="val_loss")])  # the signal lands in that validation
    assert "SIGTERM at step 5, where the run reached train.target_val_loss" in capsys.readouterr().err
    assert s["steps"] == 5 and s["time_to_target_s"] is not None and s["params_sha256"] == ref["params_sha256"]
    assert json.loads((out / "summary.json").read_text())["steps"] == 5
