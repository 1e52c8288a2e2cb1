"""`stride plan calibrate`: recover known efficiency factors from runs whose step times were
produced by the model with those factors (a closed loop: the fit must find what was put in), on
traced stride workloads of different shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config import config_to_toml, load_config
from stride.config.errors import ConfigError
from stride.perfmodel.calibrate import run_inputs
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import load_catalog

RUNS = {  # shapes from kernel-overhead-bound (batch 2) to FLOP- and byte-bound
    "tiny-b2": ["model.name=ts_transformer", "model.size=tiny", "data.seq_len=32", "train.batch_size=2"],
    "tiny-b16": ["model.name=ts_transformer", "model.size=tiny", "data.seq_len=32", "train.batch_size=16"],
    "tiny-b64": ["model.name=ts_transformer", "model.size=tiny", "data.seq_len=32", "train.batch_size=64"],
    "mlp-b32": ["model.name=mlp", "model.size=tiny", "data.seq_len=8", "train.batch_size=32"],
    "mlp-b512": ["model.name=mlp", "model.size=small", "data.seq_len=8", "train.batch_size=512"],
}


# a one-thread CPU like this machine's (stride plan probe): on a 96-core datasheet part these tiny
# models are all dispatch, and the FLOP and byte factors could not be told apart
LOCAL = """[hardware.slow-cpu]
base = "epyc-9654"
peak_tflops = { fp32 = 0.16, bf16 = 1.2 }
memory_bw_tbps = 0.0125
kernel_overhead_us = 1.0
"""


def _hw(root: Path):
    (root / "hw.toml").write_text(LOCAL)
    return load_catalog(root / "hw.toml").get("slow-cpu")


def _write_run(root: Path, name: str, overrides: list[str], true: Efficiency) -> Path:
    d = root / name
    d.mkdir()
    cfg = load_config(overrides=[*overrides, "data.n_steps=1024"])
    (d / "config.toml").write_text(config_to_toml(cfg))
    (d / "summary.json").write_text(json.dumps({"step_time_s": 1.0, "world_size": 1}))
    step = run_inputs(d).predict(_hw(root), true).step_time_s
    (d / "summary.json").write_text(json.dumps({"step_time_s": step, "world_size": 1}))
    return d


def test_calibrate_recovers_compute_factors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    true = Efficiency(gemm=0.62, memory=0.71, dispatch=0.4, attention=0.5)
    runs = [_write_run(tmp_path, name, ov, true) for name, ov in RUNS.items()]
    assert main(["plan", "calibrate", *map(str, runs), "--hardware", "slow-cpu",
                 "--hardware-file", str(tmp_path / "hw.toml")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert max(abs(r["err_pct"]) for r in out["runs"]) < 1.0
    assert out["efficiency"]["gemm"] == pytest.approx(0.62, rel=0.1)
    assert out["efficiency"]["memory"] == pytest.approx(0.71, rel=0.1)
    assert out["efficiency"]["dispatch"] == pytest.approx(0.4, rel=0.1)


def test_calibrate_rejects_incomplete_runs(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(config_to_toml(load_config()))
    with pytest.raises(ConfigError, match="missing summary.json"):
        run_inputs(tmp_path)
