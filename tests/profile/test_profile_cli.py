"""`stride analyze` from the command line: JSON shape, tables, and exit codes on bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from synth import cpu_trace, gpu_trace, write  # noqa: E402

from stride.cli.main import main  # noqa: E402


def test_json_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "run"
    d.mkdir()
    write(d / "a.json", gpu_trace())
    write(d / "b.json.gz", cpu_trace(0), gz=True)
    assert main(["analyze", str(d), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(rep) >= {"ranks", "stragglers"} and sorted(rep["ranks"]) == ["0", "3"]
    for r in rep["ranks"].values():
        assert set(r["temporal_breakdown"]) >= {"idle_pct", "compute_pct", "non_compute_pct"}
        assert {"comm_comp_overlap_pct", "idle_breakdown", "top_kernels", "verdict"} <= set(r)
        assert r["verdict"]["bound"] in {"compute-bound", "memory-bound", "communication-bound", "host-bound",
                                         "data-bound"}
        assert r["verdict"]["recommendations"]
    assert rep["ranks"]["3"]["temporal_breakdown"]["idle_pct"] == pytest.approx(40.0)


def test_table_and_hta_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path / "a.json", gpu_trace())
    assert main(["analyze", str(p), "--hta-compatible"]) == 0
    out = capsys.readouterr().out
    assert "hta definitions" in out and "volta_sgemm_128x64_nn" in out


def test_bad_input_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "broken.json"
    p.write_text('{"traceEvents": [{"ph": "X", "ts": 1')
    assert main(["analyze", str(p), "--json"]) == 1
    err = capsys.readouterr().err
    assert "broken.json" in err and "truncated" in err
    assert main(["analyze", str(tmp_path / "missing")]) == 1
    assert "no such file or directory" in capsys.readouterr().err
