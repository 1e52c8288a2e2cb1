"""metrics.jsonl after a resume: one record per step, the killed segment's steps past the checkpoint not twice.

Before: `stride train ... --set checkpoint.every=20` killed at step 40 (its checkpoint not committed) and
rerun held steps 25-40 twice: the killed segment's records and the resumed run's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ckpt_helpers import Crash, CrashAt, fit


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_a_resumed_run_logs_every_step_once(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(10)])  # log_every 1, checkpoints at 3, 6, 9; dies after logging step 10
    crashed = _records(out)
    assert [r["step"] for r in crashed] == list(range(1, 11))
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 11, "loss": 0.')  # the line a kill cut short
    s = fit(out)
    assert s["checkpoint"]["resumed_from"] == "step_00000009"
    records = _records(out)  # every line parses: the cut line did not run into the next record
    assert [r["step"] for r in records] == list(range(1, 25))
    assert records[:9] == crashed[:9]  # the records up to the checkpoint are kept as they were
    # step 10 trained again from the checkpoint: in deterministic mode the same loss as the dropped record
    assert records[9]["loss"] == crashed[9]["loss"]


def test_a_run_killed_before_its_first_checkpoint_starts_its_log_afresh(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(2)])  # no checkpoint yet (every 3)
    s = fit(out)
    assert s["checkpoint"]["resumed_from"] is None
    assert [r["step"] for r in _records(out)] == list(range(1, 25))
