"""Resuming at another parallel layout is allowed and reported; resuming another experiment is refused.

In process: layout/execution keys (a DDP bucket size, grad_accum, the loader's prefetch) resume with a
report, an optimizer change is refused with a diff. In subprocesses: checkpoints written by 2 gloo ranks
at dp_shard=2 (FSDP2) and at pp=2 (1F1B) resume in one process without `force_resume`, and the run ends
where an uninterrupted one-process run ends (not bit for bit: another layout sums in another order).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from ckpt_helpers import Crash, CrashAt, fit, write_config
from test_checkpoint_distributed_faults import HERE, _finish, _launch

from stride.checkpoint import ConfigMismatchError
from stride.train.callbacks import Callback
from stride.train.trainer import Trainer

LAYOUT_ALLOWED = ("parallel.ddp_bucket_mb=1.0", "train.grad_accum=2", "data.prefetch=0")


class FinalParams(Callback):
    def __init__(self) -> None:
        self.params: dict[str, torch.Tensor] = {}

    def on_fit_end(self, trainer: Trainer, summary: dict) -> None:
        self.params = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def reference() -> tuple[dict[str, torch.Tensor], float]:
    """Final parameters and loss of an uninterrupted one-process run (checkpointing off)."""
    rec = FinalParams()
    s = fit(Path("unused"), "checkpoint.enabled=false", callbacks=[rec], write_run_dir=False)
    return rec.params, s["final_train_loss"]


def test_layout_and_execution_changes_resume_and_are_reported(tmp_path: Path, capsys, reference) -> None:
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(4)])
    rec = FinalParams()
    s = fit(out, *LAYOUT_ALLOWED, callbacks=[rec])
    assert s["checkpoint"]["resumed_from"] == "step_00000003"
    assert s["checkpoint"]["resume_changes"] == [
        "data.prefetch: 'auto' (checkpoint) -> 0 (now)",
        "parallel.ddp_bucket_mb: 25.0 (checkpoint) -> 1.0 (now)",
        "train.grad_accum: 1 (checkpoint) -> 2 (now)",
    ]
    err = capsys.readouterr().err
    assert re.search(r"continuing at step 3 \(found and loaded in \d+\.\d\d s\); with another layout or execution "
                     r"settings \(allowed", err), err[-3000:]
    assert "train.grad_accum: 1 (checkpoint) -> 2 (now)" in err
    # the same global batch in two micro-batches: the same training, up to rounding
    assert _max_diff(rec.params, reference[0]) < 1e-6  # 6e-8 measured


def test_another_experiment_is_still_refused_with_a_diff(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(4)])
    with pytest.raises(ConfigMismatchError) as err:
        fit(out, "optim.lr=0.0005", "train.seed=3", *LAYOUT_ALLOWED)
    msg = str(err.value)
    refused, _, allowed = msg.partition("these differences alone would be allowed")
    assert "optim.lr: 0.001 (checkpoint) -> 0.0005 (now)" in refused and "train.seed: 0 (checkpoint) -> 3" in refused
    assert "grad_accum" not in refused and "train.grad_accum: 1 (checkpoint) -> 2 (now)" in allowed
    s = fit(out, "optim.lr=0.0005", "train.seed=3", "checkpoint.force_resume=true")
    assert s["checkpoint"]["resumed_from"] == "step_00000003"


@pytest.mark.slow
@pytest.mark.dist
@pytest.mark.parametrize("layout", ["parallel.dp_shard=2", "parallel.pp=2"])
def test_saved_by_two_ranks_resumes_in_one_process(tmp_path: Path, capsys, reference, layout: str) -> None:
    out = tmp_path / "run"
    cfg = write_config(tmp_path / "run.toml", layout, "checkpoint.every=0")
    # both ranks signalled after step 5's vote stop after step 6 with one checkpoint (the preemption path)
    _finish(_launch(HERE / "ckpt_signal_driver.py", ["train", str(cfg), "--out", str(out), "--no-progress"],
                    SELF_SIGNAL="0:5:end:TERM,1:5:end:TERM"))
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step_00000006"]
    rec = FinalParams()
    s = fit(out, "checkpoint.every=0", callbacks=[rec])  # the same config at one process, no force_resume
    assert s["checkpoint"]["resumed_from"] == "step_00000006" and s["steps"] == 24
    key, value = layout.split("=")
    assert s["checkpoint"]["resume_changes"] == ["world size: 2 (checkpoint) -> 1 (now)",
                                                 f"{key}: {value} (checkpoint) -> 1 (now)"]
    assert f"{key}: {value} (checkpoint) -> 1 (now)" in capsys.readouterr().err
    diff = _max_diff(rec.params, reference[0])
    assert diff < 1e-6, diff  # 1.2e-7 measured: rounding
    assert s["final_train_loss"] == pytest.approx(reference[1], rel=1e-5)


@pytest.mark.slow
@pytest.mark.dist
def test_fsdp_async_saves_with_background_staging_resume_bit_for_bit(tmp_path: Path) -> None:
    """2 FSDP2 ranks (DTensor state), async saves whose copy runs in the staging thread beside the next
    forward and backward (stride's GIL-free stager): resuming from the step-6 save ends where the
    uninterrupted run ends, bit for bit (the same layout sums in the same order)."""
    import json
    import shutil

    cfg = write_config(tmp_path / "run.toml", "parallel.dp_shard=2", "train.steps=12", "checkpoint.every=6",
                       "checkpoint.keep_last=5", "checkpoint.async_save=true", "checkpoint.staging=background")

    def run(out: Path) -> dict:
        _finish(_launch(HERE / "ckpt_signal_driver.py", ["train", str(cfg), "--out", str(out), "--no-progress"]))
        return json.loads((out / "summary.json").read_text())

    whole = run(tmp_path / "whole")
    assert whole["checkpoint"]["staging"] == "background" and whole["checkpoint"]["saved_steps"] == [6, 12]
    shutil.copytree(tmp_path / "whole" / "checkpoints", tmp_path / "resumed" / "checkpoints")
    shutil.rmtree(tmp_path / "resumed" / "checkpoints" / "step_00000012")
    resumed = run(tmp_path / "resumed")
    assert resumed["checkpoint"]["resumed_from"] == "step_00000006"
    assert resumed["params_sha256"] == whole["params_sha256"]


@pytest.mark.slow
@pytest.mark.dist
@pytest.mark.parametrize("layout", ["parallel.dp_replicate=2", "parallel.pp=2", "parallel.tp=2"])
def test_saved_by_one_process_resumes_on_two_ranks(tmp_path: Path, reference, layout: str) -> None:
    """Audit 6 (F2): the rank a checkpoint has no data state for replayed its batches from where Trainer.setup had
    left its loader, one batch ahead of rank 0: DDP trained on another global batch (final loss 0.954 against
    1.027), and under pp=2 the first stage's inputs met the last stage's targets of the next batch. Now its
    position is set from the steps taken: the run ends where the uninterrupted one-process run ends, up to the
    rounding of another layout."""
    import json

    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(4)])  # saves at step 3
    cfg = write_config(tmp_path / "run.toml", layout)
    _finish(_launch(HERE / "ckpt_signal_driver.py", ["train", str(cfg), "--out", str(out), "--no-progress"]))
    s = json.loads((out / "summary.json").read_text())
    assert s["checkpoint"]["resumed_from"] == "step_00000003" and s["steps"] == 24
    assert s["final_train_loss"] == pytest.approx(reference[1], rel=1e-5), (s["final_train_loss"], reference[1])
