"""Per-precision factors: a bf16 step on a CPU is costed with its own per-kernel and attention factors.

Before: one `dispatch` and one `attention` factor served fp32 and bf16 steps alike. On an Intel Xeon with AMX a
kernel of a small model's bf16 step cost ~30x an fp32 step's (each bf16 GEMM call a fixed 0.1-0.2 ms, autocast's
casts) and bf16 flash attention's backward ran 7-14x slower than fp32's, so factors fitted on fp32 runs predicted
bf16 steps a median 47 % (up to 67 %) too fast, and factors fitted on a mix of both fitted neither. The step
times here are made by the model itself with known factors (a closed loop: the fit must find what was put in)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config import config_to_toml, load_config
from stride.config.errors import ConfigError
from stride.perfmodel.calibrate import calibrate, run_inputs
from stride.perfmodel.efficiency import Efficiency, load_efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.local_check import main as local_check_main

MLP = ["model.name=mlp", "model.size=tiny", "data.seq_len=8"]
TS = ["model.name=ts_transformer", "model.size=tiny", "data.seq_len=32"]
FIT = {"mlp-b32": (*MLP, "train.batch_size=32"), "mlp-b512": (*MLP, "train.batch_size=512"),
       "ts-b4": (*TS, "train.batch_size=4"), "ts-b64": (*TS, "train.batch_size=64")}
HELD = {"mlp-b128": (*MLP, "train.batch_size=128"), "ts-b16": (*TS, "train.batch_size=16")}
# a one-thread CPU like the one measured (stride plan probe: bf16 matmul 7x fp32's)
HW = """[hardware.slow-cpu]
base = "epyc-9654"
peak_tflops = { fp32 = 0.14, bf16 = 1.0 }
memory_bw_tbps = 0.0105
kernel_overhead_us = 1.2
"""
# what the runs measured here looked like: a bf16 kernel ~25x an fp32 one, bf16 attention 0.2 % of its peak
TRUE = Efficiency(gemm=0.9, memory=0.85, dispatch_fp32=0.5, dispatch_bf16=0.04, attention_fp32=0.4,
                  attention_bf16=0.002)


def _write(root: Path, name: str, overrides: tuple[str, ...], true: Efficiency) -> str:
    d = root / name
    d.mkdir()
    (d / "config.toml").write_text(config_to_toml(load_config(overrides=[*overrides, "data.n_steps=1024"])))
    (d / "summary.json").write_text(json.dumps({"step_time_s": 1.0, "world_size": 1, "device": "cpu"}))
    step = run_inputs(d).predict(load_catalog(root / "hw.toml").get("slow-cpu"), true).step_time_s
    (d / "summary.json").write_text(json.dumps({"step_time_s": step, "world_size": 1, "device": "cpu"}))
    return str(d)


def _write_all(root: Path, runs: dict[str, tuple[str, ...]]) -> dict[str, str]:
    return {f"{n}-{p}": _write(root, f"{n}-{p}", (*ov, f"train.precision={p}"), TRUE)
            for n, ov in runs.items() for p in ("fp32", "bf16")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """FIT's runs in both precisions (a census each: about half a second)."""
    root = tmp_path_factory.mktemp("dtype")
    (root / "hw.toml").write_text(HW)
    return root, _write_all(root, FIT)


def _hw(root: Path) -> list[str]:
    return ["--hardware", "slow-cpu", "--hardware-file", str(root / "hw.toml")]


@pytest.fixture(scope="module")
def fitted(runs: tuple[Path, dict[str, str]]) -> tuple[dict, str]:
    """`stride plan calibrate` on both precisions' FIT runs: its JSON and stderr (one fit for the tests)."""
    import contextlib
    import io

    root, made = runs
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["plan", "calibrate", *(made[f"{n}-{p}"] for n in FIT for p in ("fp32", "bf16")), *_hw(root)]) == 0
    return json.loads(out.getvalue()), err.getvalue()


def test_a_precision_reads_its_own_factors_and_falls_back_to_the_shared() -> None:
    eff = Efficiency(dispatch=0.3, dispatch_bf16=0.03)
    assert eff.for_precision("dispatch", "bf16") == 0.03
    assert eff.for_precision("dispatch", "fp32") == 0.3 and eff.for_precision("attention", "bf16") == 0.5
    assert eff.own_precisions() == ["bf16"]
    # unset own factors are not written: a calibration JSON without them reads as before
    assert list(Efficiency().to_dict()) == ["gemm", "gemm_tpu", "attention", "flash", "memory", "network",
                                            "overlap", "dispatch"]
    assert eff.to_dict()["dispatch_bf16"] == 0.03 and "attention_bf16" not in eff.to_dict()
    with pytest.raises(ValueError, match="`gemm` has no per-precision factors"):
        eff.for_precision("gemm", "bf16")


def test_bad_own_factors_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"efficiency `attention_bf16` must be in \(0, 1\], got 0"):
        Efficiency(attention_bf16=0)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"dispatch_bf16": "fast"}))
    with pytest.raises(ConfigError, match="efficiency `dispatch_bf16` must be a number, got 'fast'"):
        load_efficiency(bad)
    bad.write_text(json.dumps({"dispatch_bf17": 0.1}))
    with pytest.raises(ConfigError, match=r"unknown efficiency factor\(s\) \['dispatch_bf17'\]"):
        load_efficiency(bad)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"dispatch_bf16": 0.04}))
    assert load_efficiency(good, note="test").dispatch_bf16 == 0.04
    # the note lists the shared factors taken from the shipped fit, not the optional own ones
    err = capsys.readouterr().err
    assert "does not set gemm, gemm_tpu, attention, flash, memory, network, overlap, dispatch:" in err


def test_only_the_bf16_step_reads_bf16_factors(runs: tuple[Path, dict[str, str]]) -> None:
    root, made = runs
    hw = load_catalog(root / "hw.toml").get("slow-cpu")
    fp32, bf16 = run_inputs(Path(made["ts-b64-fp32"])), run_inputs(Path(made["ts-b64-bf16"]))
    shared = Efficiency(dispatch=0.5, attention=0.4)
    own = Efficiency(dispatch=0.5, attention=0.4, dispatch_bf16=0.04, attention_bf16=0.002)
    assert fp32.predict(hw, own).step_time_s == fp32.predict(hw, shared).step_time_s
    # the bf16 step is the one the shared factors would give at the bf16 values
    assert bf16.predict(hw, own).step_time_s == pytest.approx(
        bf16.predict(hw, Efficiency(dispatch=0.04, attention=0.002)).step_time_s, rel=1e-12)
    assert bf16.predict(hw, own).step_time_s > 2 * bf16.predict(hw, shared).step_time_s


def test_calibrate_fits_each_precision(fitted: tuple[dict, str]) -> None:
    out, err = fitted
    eff = out["efficiency"]
    for name in ("gemm", "memory", "dispatch_fp32", "dispatch_bf16", "attention_fp32", "attention_bf16"):
        assert eff[name] == pytest.approx(getattr(TRUE, name), rel=0.15), name
    assert max(abs(r["err_pct"]) for r in out["runs"]) < 1.0
    assert {r["precision"] for r in out["runs"]} == {"fp32", "bf16"}
    # bf16's factors far below 1 are what such kernels measure on a CPU: notes, not "is the host busy?" warnings
    assert not [w for w in out["warnings"] if "bf16" in w]
    assert any(n.startswith("fitted dispatch_bf16 = ") and "GEMM call's fixed cost" in n for n in out["notes"])
    (fp16,) = [n for n in out["notes"] if n.startswith("fp16 steps")]
    assert "shared attention = 0.5 (not fitted: the default priors)" in fp16 and "no run of their own" in fp16
    assert "stride plan calibrate: note: fp16 steps" in err


def test_held_out_runs_of_both_precisions_are_predicted(runs: tuple[Path, dict[str, str]],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Other batch sizes of both models, both precisions, from factors fitted on FIT (local_check's CLI)."""
    root, made = runs
    fit = [made[f"{n}-{p}"] for n in FIT for p in ("fp32", "bf16")]
    held = list(_write_all(root, HELD).values())
    assert local_check_main(["--hardware-file", str(root / "hw.toml"), "--hardware", "slow-cpu",
                             "--fit", *fit, "--predict", *held]) == 0
    check = json.loads(capsys.readouterr().out)
    assert set(check["held_out_median_abs_pct"]) == {"fp32", "bf16"}
    assert max(check["held_out_median_abs_pct"].values()) < 2.0


def test_one_shared_factor_cannot_fit_both_precisions(runs: tuple[Path, dict[str, str]]) -> None:
    """What calibrate did before: one dispatch and one attention over both precisions' runs leaves the bf16
    runs far off; the per-precision fit meets them."""
    root, made = runs
    hw = load_catalog(root / "hw.toml").get("slow-cpu")
    fit = [run_inputs(Path(made[f"{n}-{p}"])) for n in FIT for p in ("fp32", "bf16")]
    _, shared = calibrate(fit, hw, factors=("gemm", "memory", "dispatch", "attention"))
    assert max(abs(r["err_pct"]) for r in shared if r["precision"] == "bf16") > 30
    _, own = calibrate(fit, hw)
    assert max(abs(r["err_pct"]) for r in own) < 1.0


def test_one_precision_keeps_shared_factors_and_says_so(runs: tuple[Path, dict[str, str]],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    root, made = runs
    assert main(["plan", "calibrate", *(made[f"{n}-fp32"] for n in FIT), *_hw(root)]) == 0
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert not set(out["efficiency"]) - set(Efficiency().to_dict())  # no own factors: the shared ones, fitted
    (note,) = out["notes"]
    assert note.startswith("bf16 and fp16 steps will be predicted with the shared attention = ")
    assert "(fitted on the fp32 runs)" in note and "to fit its own (attention_bf16, dispatch_bf16)" in note
    assert f"stride plan calibrate: note: {note}" in cap.err


def test_a_run_cannot_be_fitted_and_held_out(runs: tuple[Path, dict[str, str]],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    root, made = runs
    run = made["mlp-b32-fp32"]
    assert local_check_main(["--hardware-file", str(root / "hw.toml"), "--hardware", "slow-cpu",
                             "--fit", run, "--predict", run]) == 2
    assert f"runs to predict are also fitted (the same config.toml): {run} (as {run})" in capsys.readouterr().err
