"""The 8-bit and factored optimizer states go through the DCP checkpoint path: a run killed after a
checkpoint and resumed ends with the same parameter hash as one uninterrupted run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checkpoint"))

from ckpt_helpers import Crash, CrashAt, fit, reference_sha  # noqa: E402


@pytest.mark.parametrize("name", ["adamw8bit", "adafactor"])
def test_killed_and_resumed_run_equals_uninterrupted(name, tmp_path):
    override = f'optim.name="{name}"'
    ref = reference_sha(override)
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, override, callbacks=[CrashAt(7)])  # the last checkpoint is at step 6
    resumed = fit(out, override)
    assert resumed["steps"] == 24 and resumed["params_sha256"] == ref
