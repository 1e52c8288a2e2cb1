"""A finished run's rerun message advises raising train.steps only where a checkpoint of its last step passed the
verifier (outside review). A run whose summary.json says it finished at step 24 and whose checkpoint of step 24 fails
its checksum was told "raise train.steps (it continues from step 24)", and the extension was then refused ("cannot be
extended exactly"). The verifier had already run (CheckpointFolder.newest_valid, the check the loader relies on, no
tensor loaded) and named the damaged checkpoint; the message now says that instead of the advice.

A manifest forged to match damaged shards (checksums rewritten) passes that verifier: only loading the tensors tells,
so such a run is still told to raise train.steps, and the load of the extension then falls back or stops."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from ckpt_helpers import ckpt_config

from stride.checkpoint.rerun import decide, finished_message
from stride.checkpoint.store import CheckpointStore
from stride.train.trainer import Trainer


@pytest.fixture
def finished(tmp_path: Path) -> Path:
    """A real finished run: 24 steps, checkpoints of steps 21 and 24 (checksummed), summary.json."""
    out = tmp_path / "run"
    try:
        Trainer(config=ckpt_config(), out=out).fit()
    finally:
        torch.use_deterministic_algorithms(False)
    return out


def _rerun_message(out: Path) -> str:
    """What a rerun of the same config decides and says, from the verified newest checkpoint (as the callback)."""
    store = CheckpointStore(out / "checkpoints", checksums=True, log=lambda _: None)
    choice = store.newest_valid()
    verdict = decide(choice.step, choice.meta or {}, 24, 24, choice.folder, choice.skipped)
    assert verdict.kind == "finished" and verdict.ended_at == 24
    return finished_message(out, verdict.ended_at, 24, True, verdict.last_unusable)


def test_a_finished_run_with_a_valid_last_checkpoint_is_told_to_raise_train_steps(finished: Path) -> None:
    msg = _rerun_message(finished)
    assert "finished at step 24" in msg and "raise train.steps (it continues from step 24)" in msg


def test_a_finished_run_whose_last_checkpoint_fails_its_checksum_is_not_told_to_raise_train_steps(
        finished: Path) -> None:
    shard = next((finished / "checkpoints" / "step_00000024").glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: same size, another checksum
    shard.write_bytes(bytes(data))
    msg = _rerun_message(finished)
    assert "finished at step 24" in msg and "nothing trained" in msg
    assert "raise train.steps" not in msg
    assert "no valid checkpoint of step 24" in msg and f"step_00000024: {shard.name} does not match" in msg
    assert "put back a valid step_00000024" in msg


def test_the_rerun_itself_says_so(finished: Path) -> None:
    """End to end: the same config on the same folder again, through the trainer's checkpoint callback."""
    shard = next((finished / "checkpoints" / "step_00000024").glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    before = (finished / "summary.json").read_bytes()
    try:
        result = Trainer(config=ckpt_config(), out=finished).fit()
    finally:
        torch.use_deterministic_algorithms(False)
    msg = result.already_finished or ""
    assert "finished at step 24" in msg and "raise train.steps" not in msg
    assert "no valid checkpoint of step 24" in msg
    assert (finished / "summary.json").read_bytes() == before  # nothing changed
