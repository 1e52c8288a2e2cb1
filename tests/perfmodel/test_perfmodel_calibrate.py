"""`stride plan calibrate`: recover known efficiency factors from runs whose step times were
produced by the model with those factors (a closed loop: the fit must find what was put in), on
traced stride workloads of different shapes; and that it refuses hardware the runs did not run on.

Before: CPU runs fitted against the default `--hardware h100-sxm` without a word, a 2-thread run fitted against
a 1-thread probe without a word, and a fitted factor above 1 (memory 2.15) passed as if measured."""

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
from stride.perfmodel.probe import hardware_toml

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
    assert out["warnings"] == []
    assert max(abs(r["err_pct"]) for r in out["runs"]) < 1.0
    assert out["efficiency"]["gemm"] == pytest.approx(0.62, rel=0.1)
    assert out["efficiency"]["memory"] == pytest.approx(0.71, rel=0.1)
    assert out["efficiency"]["dispatch"] == pytest.approx(0.4, rel=0.1)


def test_calibrate_rejects_incomplete_runs(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(config_to_toml(load_config()))
    with pytest.raises(ConfigError, match="missing summary.json"):
        run_inputs(tmp_path)


def test_calibrate_flags_a_factor_above_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Runs twice as fast in memory as the entry's copy rate: memory is fitted at 2, kept (its CPU range allows
    it: caches), and named in a warning."""
    true = Efficiency(gemm=0.62, memory=2.0, dispatch=0.4, attention=0.5)
    runs = [_write_run(tmp_path, name, ov, true) for name, ov in RUNS.items()]
    assert main(["plan", "calibrate", *map(str, runs), "--hardware", "slow-cpu",
                 "--hardware-file", str(tmp_path / "hw.toml")]) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert out["efficiency"]["memory"] == pytest.approx(2.0, rel=0.1)
    (line,) = [w for w in out["warnings"] if "slower than hardware" not in w]  # made-up times: factors far below 1
    assert "fitted memory = " in line and "above 1" in line and "slow-cpu" in line and line in cap.err


def _fake_run(root: Path, name: str, device: str, torch_threads: int, overrides: tuple[str, ...] = ()) -> str:
    """A run directory as `stride train` leaves it, as far as calibrate reads it (no training)."""
    d = root / name
    d.mkdir()
    cfg = load_config(overrides=["model.name=mlp", "model.size=tiny", "data.seq_len=8", "train.batch_size=32",
                                 "data.n_steps=1024", *overrides])
    (d / "config.toml").write_text(config_to_toml(cfg))
    (d / "summary.json").write_text(json.dumps({"step_time_s": 0.01, "world_size": 1, "device": device}))
    (d / "env.json").write_text(json.dumps({"torch_threads": torch_threads}))
    return str(d)


def test_cpu_runs_are_refused_against_a_gpu_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _fake_run(tmp_path, "base", "cpu", 2)
    assert main(["plan", "calibrate", run]) == 2  # the default --hardware is h100-sxm
    err = capsys.readouterr().err
    assert f"{run}: ran on cpu" in err and "h100-sxm is not a CPU entry" in err and "--hardware-file" in err
    assert "stride plan probe" in err and len(err.strip().splitlines()) == 1


def test_runs_of_mixed_devices_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cpu, gpu = _fake_run(tmp_path, "cpu", "cpu", 1), _fake_run(tmp_path, "gpu", "cuda:0", 1)
    _hw(tmp_path)
    assert main(["plan", "calibrate", cpu, gpu, "--hardware", "slow-cpu",
                 "--hardware-file", str(tmp_path / "hw.toml")]) == 2
    err = capsys.readouterr().err
    assert "different devices" in err and f"{cpu} (cpu)" in err and f"{gpu} (cuda)" in err


PROBED = {"fp64_tflops": 0.08, "fp32_tflops": 0.16, "bf16_tflops": 1.27, "memory_bw_tbps": 0.0125,
          "kernel_overhead_us": 0.93, "fsdp_unit_overhead_us": 1760.0, "contention_slowdown": 1.03, "threads": 1}


def test_a_run_at_another_thread_count_than_the_probe_is_named(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The entry `stride plan probe` writes (1 thread) against a run on torch's default 2 threads (env.json) and
    one at train.threads=1: only the first is named, with both counts."""
    (tmp_path / "probe.toml").write_text(hardware_toml("local-cpu", PROBED, cores=2))
    two = _fake_run(tmp_path, "two", "cpu", 2)
    one = _fake_run(tmp_path, "one", "cpu", 2, ("train.threads=1",))  # config.toml's threads, not the env's
    assert main(["plan", "calibrate", two, one, "--hardware", "local-cpu",
                 "--hardware-file", str(tmp_path / "probe.toml")]) == 0
    out = json.loads(capsys.readouterr().out)
    (line,) = [w for w in out["warnings"] if "thread(s) per process" in w]
    assert line.startswith(f"{two} ran 2 thread(s) per process (env.json torch_threads)")
    assert "`local-cpu` was probed with 1" in line and one not in line
    # the count is a field of the entry (`probed_threads`), not only words of its display name
    text = hardware_toml("local-cpu", PROBED, cores=2)
    assert "probed_threads = 1" in text
    renamed = "\n".join('display_name = "my box"' if ln.startswith("display_name") else ln
                         for ln in text.splitlines())
    (tmp_path / "renamed.toml").write_text(renamed + "\n")
    assert main(["plan", "calibrate", two, "--hardware", "local-cpu",
                 "--hardware-file", str(tmp_path / "renamed.toml")]) == 0
    assert any("was probed with 1" in w for w in json.loads(capsys.readouterr().out)["warnings"])
    (tmp_path / "bad.toml").write_text(text.replace("probed_threads = 1", "probed_threads = 0"))
    assert main(["plan", "calibrate", two, "--hardware", "local-cpu", "--hardware-file",
                 str(tmp_path / "bad.toml")]) == 2
    assert "probed_threads must be an integer >= 1" in capsys.readouterr().err


@pytest.mark.parametrize(("step", "parts"), [
    (1.25, {"forward": 1.0, "checkpoint": 0.25}),  # the stall counted in the step time: taken out
    (1.0, {"forward": 1.0, "checkpoint": 0.25}),  # a run recorded before it counted (parts past the step): kept
])
def test_a_checkpoint_stall_is_taken_out_of_the_measured_step(tmp_path: Path, step: float, parts: dict) -> None:
    """The trainer's step time counts checkpoint stalls (its breakdown's `checkpoint`); the model predicts the
    training step, so calibration reads the step time less the stall, where the stall is in it."""
    d = tmp_path / "ck"
    d.mkdir()
    (d / "config.toml").write_text(config_to_toml(load_config(overrides=["data.n_steps=1024"])))
    (d / "summary.json").write_text(json.dumps({"step_time_s": step, "world_size": 1, "step_time_breakdown_s": parts}))
    assert run_inputs(d).measured_step_s == pytest.approx(1.0)
