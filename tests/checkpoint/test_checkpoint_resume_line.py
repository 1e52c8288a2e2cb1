"""The resume line keeps a skipped checkpoint's reason apart from the time the resume took.

First contact: `skipped step_00000200: __0_1.distcp has 100 bytes, the manifest says 705193 in 0.03 s: continuing at
step 100` (the byte count read as "705193 in 0.03 s", the unit missing)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ckpt_helpers import Crash, CrashAt, fit


def test_a_truncated_shard_is_named_with_its_unit_and_the_time_said_apart(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(10)])  # saves at 3, 6, 9
    shard = out / "checkpoints" / "step_00000009" / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])
    s = fit(out)
    assert s["checkpoint"]["resumed_from"] == "step_00000006"
    err = capsys.readouterr().err
    assert re.search(r"resuming from step_00000006 \(the newest valid one\); skipped step_00000009: __0_0\.distcp has "
                     r"100 bytes, the manifest says \d+ bytes; continuing at step 6 \(found and loaded in \d+\.\d\d s\)"
                     r"\n", err), err[-3000:]
    assert " s: continuing" not in err
