"""`stride train --set metrics.peak_flops=1`: the peak-below-achieved warning is one line, as stride's other notes.

First contact: Python's own display, `/.../stride/train/summary.py:155: PeakBelowAchievedWarning: MFU would be ...`
and the line of source under it. The run itself was right (MFU left empty, `mfu_error` says why)."""

from __future__ import annotations

import json
from pathlib import Path

from stride.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def test_the_warning_is_one_clean_line(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["train", str(ROOT / "configs" / "quickstart.toml"), "--set", "train.steps=3", "--set",
                 "data.n_steps=1024", "--set", "metrics.peak_flops=1", "--no-progress", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "MFU would be" in line]
    assert len(said) == 1 and said[0].startswith("stride train: warning: MFU would be "), err
    assert "PeakBelowAchievedWarning" not in err and "summary.py" not in err and "mfu_fields(" not in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mfu"] is None and summary["mfu_error"] in said[0]
