"""Local calibration audit: hostile hardware files and run folders that `stride plan calibrate` took without a word.

Before: `contention_slowdown = 0` made a 2-rank CPU plan's compute free; a probe file with memory_bw_tbps deleted
took a 96-core EPYC's datasheet figure; a factor on its fit bound, a calibration run missed by 53 % or by 1e9 %
(peak_tflops 1e-9: the factors printed all the same), a failed or warm-up-only run, and a run from another CPU
went by silently; a mistyped run folder read "missing summary.json"; a probe part's assumed $1/h cost had no note.
"""

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

PROBED = {"fp64_tflops": 0.08, "fp32_tflops": 0.16, "bf16_tflops": 1.27, "memory_bw_tbps": 0.0125,
          "kernel_overhead_us": 0.93, "fsdp_unit_overhead_us": 1760.0, "contention_slowdown": 1.03, "threads": 1,
          "memory_gib": 23.5, "cpu_model": "Intel(R) Xeon(R) Processor", "cpu_count": 2}
RUNS = {  # the closed loop of test_perfmodel_calibrate: shapes from kernel-overhead-bound to FLOP- and byte-bound
    "tiny-b2": ["model.name=ts_transformer", "model.size=tiny", "data.seq_len=32", "train.batch_size=2"],
    "tiny-b16": ["model.name=ts_transformer", "model.size=tiny", "data.seq_len=32", "train.batch_size=16"],
    "tiny-b64": ["model.name=ts_transformer", "model.size=tiny", "data.seq_len=32", "train.batch_size=64"],
    "mlp-b32": ["model.name=mlp", "model.size=tiny", "data.seq_len=8", "train.batch_size=32"],
    "mlp-b512": ["model.name=mlp", "model.size=small", "data.seq_len=8", "train.batch_size=512"],
}


def _probe_file(root: Path, m: dict | None = None, drop: str | None = None, edit: tuple[str, str] | None = None,
                name: str = "local.toml") -> Path:
    """What `stride plan probe --out` writes, less the line starting `drop`, with `edit` (old, new) applied."""
    text = hardware_toml("local-cpu", m or PROBED, cores=2)
    lines = [ln for ln in text.splitlines() if not (drop and ln.startswith(drop))]
    text = "\n".join(lines) + "\n"
    if edit:
        text = text.replace(*edit)
    (root / name).write_text(text)
    return root / name


def _run(root: Path, name: str, overrides: list[str], step_s: float = 0.01, env: dict | None = None,
         **summary) -> str:
    d = root / name
    d.mkdir()
    (d / "config.toml").write_text(config_to_toml(load_config(overrides=[*overrides, "data.n_steps=1024"])))
    (d / "summary.json").write_text(json.dumps({"step_time_s": step_s, "world_size": 1, "device": "cpu", **summary}))
    if env is not None:
        (d / "env.json").write_text(json.dumps(env))
    return str(d)


def _loop(root: Path, hw_file: Path, true: Efficiency, scale: dict[str, float] | None = None) -> list[str]:
    """Runs whose step times are the model's own under `true` on the entry of `hw_file` (times `scale[name]`)."""
    hw = load_catalog(hw_file).get("local-cpu")
    out = []
    for name, ov in RUNS.items():
        d = _run(root, name, ov)
        step = run_inputs(Path(d)).predict(hw, true).step_time_s * (scale or {}).get(name, 1.0)
        (Path(d) / "summary.json").write_text(json.dumps({"step_time_s": step, "world_size": 1, "device": "cpu"}))
        out.append(d)
    return out


def _calibrate(runs: list[str], hw_file: Path, capsys: pytest.CaptureFixture[str], rc: int = 0) -> tuple[dict, str]:
    assert main(["plan", "calibrate", *runs, "--hardware", "local-cpu", "--hardware-file", str(hw_file)]) == rc
    cap = capsys.readouterr()
    return (json.loads(cap.out) if cap.out else {}), cap.err


# ---- 2: contention_slowdown below 1 --------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "0.5"])
def test_a_contention_slowdown_below_one_is_refused_naming_file_and_field(tmp_path: Path, value: str) -> None:
    """It multiplies each rank's compute where ranks share a CPU host: 1 is no slowdown, 0 made compute free."""
    f = _probe_file(tmp_path, edit=("contention_slowdown = 1.03", f"contention_slowdown = {value}"))
    with pytest.raises(ConfigError) as err:
        load_catalog(f)
    assert str(err.value).startswith(f"{f}: hardware `local-cpu`.contention_slowdown = {value} is below 1")
    ok = _probe_file(tmp_path, edit=("contention_slowdown = 1.03", "contention_slowdown = 1"), name="ok.toml")
    assert load_catalog(ok).get("local-cpu").contention_slowdown == 1.0


# ---- 3: a probe entry lacking a field the probe measures ----------------------------------------------------------

@pytest.mark.parametrize(("drop", "field"), [("memory_bw_tbps", "memory_bw_tbps"),
                                              ("kernel_overhead_us", "kernel_overhead_us"),
                                              ("contention_slowdown", "contention_slowdown"),
                                              ("peak_tflops", "peak_tflops.fp64, peak_tflops.fp32, peak_tflops.bf16")])
def test_a_probe_entry_lacking_a_measured_field_is_refused(tmp_path: Path, drop: str, field: str) -> None:
    f = _probe_file(tmp_path, drop=drop)
    with pytest.raises(ConfigError) as err:
        load_catalog(f)
    assert str(err.value).startswith(f"{f}: [hardware.local-cpu] lacks {field} (measured by `stride plan probe`)")


def test_a_probe_entry_whole_or_a_hand_entry_reads_as_before(tmp_path: Path) -> None:
    """The whole probe file reads its measured figures; an entry the probe did not write (no probed_threads) still
    inherits what it leaves out from its base."""
    hw = load_catalog(_probe_file(tmp_path)).get("local-cpu")
    assert (hw.memory_bw_tbps, hw.kernel_overhead_us, hw.peak_tflops["fp64"]) == (0.0125, 0.93, 0.08)
    (tmp_path / "hand.toml").write_text('[hardware.mine]\nbase = "epyc-9654"\npeak_tflops = { fp32 = 0.16 }\n')
    mine = load_catalog(tmp_path / "hand.toml").get("mine")
    assert (mine.memory_bw_tbps, mine.peak_tflops["bf16"]) == (0.4608, 14.7)


# ---- 4: bounds, missed runs, a hardware file that cannot describe the machine -------------------------------------

def test_runs_missed_by_more_than_10x_are_refused_and_nothing_printed(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """peak_tflops 1e-9 (a typo): every factor on a bound, the runs predicted 1e9 % slow; exit 2, no JSON."""
    good = _probe_file(tmp_path)
    runs = _loop(tmp_path, good, Efficiency(gemm=0.62, memory=0.71, dispatch=0.4, attention=0.5))
    peaks = ("fp64 = 0.08, fp32 = 0.16, bf16 = 1.27", "fp64 = 1e-9, fp32 = 1e-9, bf16 = 1e-9")
    tiny = _probe_file(tmp_path, edit=peaks, name="tiny.toml")
    out, err = _calibrate(runs, tiny, capsys, rc=2)
    assert out == {}
    last = err.strip().splitlines()[-1]
    assert "the fitted factors miss their own calibration runs by more than 10x" in last
    assert all(f"{r} (+" in last for r in runs) and "no factors written" in last
    assert "peak_tflops.fp32 = 1e-09 TFLOP/s is below any CPU's (0.001)" in err
    assert "fitted gemm = 1 sits on its upper bound (1)" in err


def test_an_implausible_cpu_figure_and_a_factor_on_its_bound_are_named(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """memory_bw_tbps = 900 (past any CPU: the catalog's best is epyc-9654's 0.4608) pins memory on its lower bound
    0.3."""
    runs = _loop(tmp_path, _probe_file(tmp_path), Efficiency(gemm=0.62, memory=0.71, dispatch=0.4, attention=0.5))
    huge = _probe_file(tmp_path, edit=("memory_bw_tbps = 0.0125", "memory_bw_tbps = 900"), name="huge.toml")
    out, err = _calibrate(runs, huge, capsys)
    w = out["warnings"]
    assert w[0].startswith("hardware `local-cpu`'s memory_bw_tbps = 900 TB/s is above every CPU in the catalog "
                           "(`epyc-9654`: 0.4608)") and w[0] in err
    assert out["efficiency"]["memory"] == 0.3
    assert any(x.startswith("fitted memory = 0.3 sits on its lower bound (0.3)") for x in w)


def test_a_calibration_run_missed_past_25_percent_is_named_with_its_error(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """One run measured 2x what the model makes of its mates' factors: the fit meets the others and names it."""
    true = Efficiency(gemm=0.62, memory=0.71, dispatch=0.4, attention=0.5)
    good = _probe_file(tmp_path)
    runs = _loop(tmp_path, good, true, {"tiny-b16": 2.0})
    out, err = _calibrate(runs, good, capsys)
    w = out["warnings"]
    missed = [x for x in w if "miss calibration run" in x]
    assert len(missed) == 1 and f"{runs[1]} (-" in missed[0]
    err_pct = next(r["err_pct"] for r in out["runs"] if r["run"] == runs[1])
    assert err_pct < -25 and f"({err_pct:+.3g} %" in missed[0] and all(x in err for x in w)


# ---- 5: failed and warm-up-only runs -------------------------------------------------------------------------------

MLP = ["model.name=mlp", "model.size=tiny", "data.seq_len=8", "train.batch_size=32"]


@pytest.mark.parametrize(("fields", "why"), [({"status": "failed", "steps": 0}, 'summary.json status = "failed"'),
                                             ({"status": "finished", "steps": 0}, "summary.json steps = 0"),
                                             ({"timed_steps": 0}, "summary.json timed_steps = 0")])
def test_a_run_that_timed_no_step_is_refused_naming_the_folder(tmp_path: Path, fields: dict, why: str) -> None:
    d = _run(tmp_path, "z", MLP, 0.076, **fields)
    with pytest.raises(ConfigError) as err:
        run_inputs(Path(d))
    assert str(err.value).startswith(f"{d}: {why}")


def test_a_run_timed_with_its_warm_up_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    note = ("train.steps = 2 is not above metrics.skip_steps = 3: every step was timed, warm-up included, so step "
            "time and throughput are not steady-state")
    f = _probe_file(tmp_path)
    runs = _loop(tmp_path, f, Efficiency(gemm=0.62, memory=0.71, dispatch=0.4, attention=0.5))
    two = Path(runs[0]) / "summary.json"
    two.write_text(json.dumps({**json.loads(two.read_text()), "status": "finished", "steps": 2, "timing_note": note}))
    out, err = _calibrate(runs, f, capsys)
    (line,) = [w for w in out["warnings"] if "steady-state" in w]
    assert line.startswith(f"{runs[0]} is not steady-state ({note})") and line in err


# ---- 6: runs from another machine ----------------------------------------------------------------------------------

def test_a_run_on_another_cpu_than_the_probe_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _probe_file(tmp_path)
    assert 'probed_cpu_model = "Intel(R) Xeon(R) Processor"' in f.read_text()
    hw = load_catalog(f).get("local-cpu")
    assert (hw.probed_cpu_model, hw.probed_cpu_count) == ("Intel(R) Xeon(R) Processor", 2)
    here = _run(tmp_path, "here", MLP, 0.01, env={"cpu_model": "Intel(R) Xeon(R) Processor", "cpu_count": 2})
    other = _run(tmp_path, "other", MLP, 0.01, env={"cpu_model": "AMD EPYC 7B13 64-Core Processor", "cpu_count": 2})
    out, _ = _calibrate([here, other], f, capsys)
    (line,) = [w for w in out["warnings"] if "env.json cpu_model" in w]
    assert line.startswith(f"{other} ran on CPU 'AMD EPYC 7B13 64-Core Processor' (env.json cpu_model) but hardware "
                           "`local-cpu` was probed on CPU 'Intel(R) Xeon(R) Processor'")
    # a probe file from before the probe recorded its CPU: not checked, and one note says so
    old = {k: v for k, v in PROBED.items() if k not in ("cpu_model", "cpu_count")}
    out, _ = _calibrate([here, other], _probe_file(tmp_path, old, name="old.toml"), capsys)
    assert not [w for w in out["warnings"] if "env.json cpu_model" in w]
    assert [n for n in out["notes"] if "does not record the CPU it was probed on" in n] == [
        "hardware `local-cpu` does not record the CPU it was probed on (a probe file from an older stride): whether "
        "the runs ran on that machine is not checked; probe again to have it checked"]


# ---- 8: a run folder that does not exist ---------------------------------------------------------------------------

def test_a_run_folder_that_does_not_exist_is_said_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "calibrate", str(tmp_path / "NONEXISTENT"), "--hardware", "epyc-9654"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'NONEXISTENT'}: no such run directory" in err and "summary.json" not in err


# ---- 9: a probe part's cost rests on its base's assumed price ------------------------------------------------------

def test_a_workload_plan_on_a_probe_part_says_its_price_is_assumed(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    f = _probe_file(tmp_path)
    args = ["plan", "--workload", "mlp_tiny", "--devices", "1", "--hardware", "local-cpu", "--json"]
    assert main([*args, "--hardware-file", str(f)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best"]["cost_per_step_usd"] > 0
    (note,) = [n for n in out["notes"] if "price" in n]
    assert note.startswith("cost is priced at 1 USD a device-hour, an assumed figure (local-cpu is a `stride plan "
                           "probe` entry")
    priced = _probe_file(tmp_path, edit=(', "price_per_hour_usd"]', ']\nprice_per_hour_usd = 0.3'),
                         name="priced.toml")
    assert main([*args, "--hardware-file", str(priced)]) == 0
    assert not [n for n in json.loads(capsys.readouterr().out)["notes"] if "price" in n]
