"""`stride plan calibrate`: recover known efficiency factors from runs whose step times were
produced by the model with those factors (a closed loop: the fit must find what was put in)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config.errors import ConfigError
from stride.perfmodel.calibrate import run_inputs
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import load_catalog

CONFIG = """[model]
name = "ts_transformer"
size = "{size}"
[data]
seq_len = {seq}
[train]
batch_size = {batch}
precision = "fp32"
"""


def _write_run(root: Path, name: str, size: str, seq: int, batch: int, true: Efficiency) -> Path:
    d = root / name
    d.mkdir()
    (d / "config.toml").write_text(CONFIG.format(size=size, seq=seq, batch=batch))
    spec, lay, gb, _ = _stub_inputs(d)
    step = predict(spec, lay, load_catalog().get("epyc-9654"), gb, true).step_time_s
    (d / "summary.json").write_text(json.dumps({"step_time_s": step, "samples_per_s": gb / step}))
    return d


def _stub_inputs(d: Path):
    (d / "summary.json").write_text(json.dumps({"step_time_s": 1.0}))
    return run_inputs(d)


def test_calibrate_recovers_compute_factors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    true = Efficiency(gemm=0.62, memory=0.71)
    runs = [_write_run(tmp_path, f"r{i}", size, seq, batch, true)
            for i, (size, seq, batch) in enumerate([("tiny", 64, 64), ("small", 128, 32), ("base", 256, 16),
                                                    ("large", 64, 8)])]
    assert main(["plan", "calibrate", *map(str, runs), "--hardware", "epyc-9654"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert max(abs(r["err_pct"]) for r in out["runs"]) < 1.0
    assert out["efficiency"]["gemm"] == pytest.approx(0.62, abs=0.03)
    assert out["efficiency"]["memory"] == pytest.approx(0.71, abs=0.05)


def test_calibrate_rejects_incomplete_runs(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(CONFIG.format(size="tiny", seq=64, batch=8))
    with pytest.raises(ConfigError, match="missing summary.json"):
        run_inputs(tmp_path)
