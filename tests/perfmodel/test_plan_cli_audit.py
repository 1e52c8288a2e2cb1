"""`stride plan` audit: each test failed before its fix.

1. `stride plan probe` kept the base part's 768 GiB (listed as assumed): a 2-rank plan "fit" 71 GiB a rank on a
   23 GiB host. 2. Network words in --hardware ("1x 25GbE per node") planned exactly as the plain part. 3. --json
   of a described part said only "h100-sxm"; the table header said the catalog's 80GB of a 96 GB plan.
4. Options the chosen mode does not read went by without a word. 5. A partial --efficiency JSON filled the rest
   from the unfitted priors, not the shipped fit. 6. Calibrating four factors on one run reported a 0.00005 % error
   and no warning. 7. v100 with the default bf16 did not say to pass fp16. 8. No layout fitting exited 1 with a
   table but 0 with --json. 9. --compare-hardware with a described part did not say it takes catalog names only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from stride.cli.main import main
from stride.config import config_to_toml, load_config
from stride.perfmodel import probe as probe_mod
from stride.perfmodel.calibrate import run_inputs
from stride.perfmodel.efficiency import Efficiency, load_efficiency, shipped_efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.probe import hardware_toml, host_memory_gib

MEASURED = {"fp64_tflops": 0.031, "fp32_tflops": 0.062, "bf16_tflops": 0.15, "memory_bw_tbps": 0.0177,
            "kernel_overhead_us": 2.0, "fsdp_unit_overhead_us": 1600.0, "contention_slowdown": 1.1, "threads": 1}
PLAN = ["plan", "--model", "llama3-8b", "--devices", "8", "--global-batch", "64", "--json"]


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


# -- 1. the probe writes this host's memory -----------------------------------------------------------------------

def test_host_memory_is_the_machines_ram() -> None:
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    got = host_memory_gib()
    assert 0 < got <= ram + 1e-9  # the RAM, or a lower cgroup limit
    limit = probe_mod._cgroup_limit_bytes()
    assert got == pytest.approx(min(ram, limit / 2**30) if limit else ram)


def test_probe_measures_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """probe() returns the host's memory beside its timings (the timings stubbed: they take minutes)."""
    monkeypatch.setattr(probe_mod, "measured_matmul_peak", lambda dev, dtype: 1e11)
    monkeypatch.setattr(probe_mod, "copy_bandwidth", lambda: 1e10)
    monkeypatch.setattr(probe_mod, "kernel_overhead_s", lambda: 2e-6)
    monkeypatch.setattr(probe_mod, "fsdp_unit_overhead_s", lambda: 1e-3)
    threads = torch.get_num_threads()
    try:
        m = probe_mod.probe(2)
    finally:
        torch.set_num_threads(threads)
    assert m["memory_gib"] == pytest.approx(host_memory_gib())


def test_probed_entry_carries_the_measured_memory_not_the_base_parts(tmp_path: Path) -> None:
    toml = tmp_path / "local.toml"
    toml.write_text(hardware_toml("local-cpu", {**MEASURED, "memory_gib": 23.5}, cores=2))
    hw = load_catalog(toml).get("local-cpu")
    assert hw.memory_gib == pytest.approx(23.5) and "memory_gib" not in hw.assumed
    assert load_catalog().get("epyc-9654").memory_gib == 768
    # an entry written from figures without memory keeps the base's, and says it is assumed
    toml.write_text(hardware_toml("local-cpu", MEASURED, cores=2))
    hw = load_catalog(toml).get("local-cpu")
    assert hw.memory_gib == 768 and "memory_gib" in hw.assumed


def test_a_local_plan_no_longer_fits_more_than_the_host_holds(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The audit's plan: layouts needing tens of GiB a rank fit the base's 768 GiB, not a small host's RAM."""
    (tmp_path / "local.toml").write_text(hardware_toml("local-cpu", {**MEASURED, "memory_gib": 4.0}, cores=2))
    args = ["--workload", "configs/quickstart.toml", "--hardware", "local-cpu", "--hardware-file",
            str(tmp_path / "local.toml"), "--devices", "2", "--global-batch", "200000", "--json"]
    code, out, _ = _plan(capsys, *args)
    res = json.loads(out)
    assert code == 0 and res["best"] is not None
    assert all(p["peak_mem_gib"] <= 4.0 for p in res["ranked"])
    assert res["fastest_not_fitting"] and all(p["peak_mem_gib"] > 4.0 for p in res["fastest_not_fitting"])
    (tmp_path / "big.toml").write_text(hardware_toml("local-cpu", MEASURED, cores=2))  # 768 GiB: they fit
    _, out, _ = _plan(capsys, *[str(tmp_path / "big.toml") if a.endswith("local.toml") else a for a in args])
    assert max(p["peak_mem_gib"] for p in json.loads(out)["ranked"]) > 4.0


# -- 2. network words in --hardware -------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "gbytes"), [
    ("H100 SXM, 1x 25GbE per node", 25 / 8 / 8),
    ("H100 SXM, 8x HDR InfiniBand 200 Gb/s per node", 25.0),
    ("H100 SXM scale-out 1 GB/s", 1.0),
    ("H100 SXM 3.35TB/s, NDR InfiniBand 400 Gb/s per GPU", 50.0),  # the memory's TB/s is not the network's
    ("H100 SXM NVLink 900 GB/s, RoCE 400 Gb/s per GPU", 50.0),
])
def test_link_words_set_the_scale_out_bandwidth(text: str, gbytes: float, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _plan(capsys, *PLAN[1:], "--hardware", text)
    res = json.loads(out)
    assert code == 0 and res["hardware"] == "h100-sxm" and res["hardware_text"] == text
    (note,) = [n for n in res["hardware_notes"] if "scale-out" in n]
    assert f"scale-out {gbytes:.4g} GB/s per device" in note and note in err

    from stride.cli.plan import _device

    hw, _ = _device(load_catalog(), text, quiet=True)
    assert hw.scaleout_bw_gbps == pytest.approx(gbytes)
    assert hw.memory_bw_tbps == load_catalog().get("h100-sxm").memory_bw_tbps or "TB/s" in text


def test_a_slow_network_slows_a_plan_that_crosses_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--model", "llama3-70b", "--devices", "64", "--json"]
    times = {}
    for text in ("H100 SXM", "H100 SXM, 1x 25GbE per node", "H100 SXM scale-out 1 GB/s"):
        code, out, _ = _plan(capsys, *base, "--hardware", text)
        assert code == 0
        times[text] = json.loads(out)["best"]["step_time_s"]
    assert times["H100 SXM, 1x 25GbE per node"] > times["H100 SXM"] * 1.05
    assert times["H100 SXM scale-out 1 GB/s"] > times["H100 SXM"] * 1.05


def test_link_words_without_a_rate_are_an_error_naming_the_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _plan(capsys, *PLAN[1:], "--hardware", "H100 SXM over ethernet")
    assert code == 2 and out == ""
    assert "'H100 SXM over ethernet'" in err and "ethernet" in err and "Gb/s" in err


def test_devices_per_node_is_not_a_network(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _plan(capsys, *PLAN[1:], "--hardware", "H100 SXM, 8 GPUs per node")
    assert code == 0 and not any("scale-out" in n for n in json.loads(out)["hardware_notes"])


# -- 3. what the text changed, in --json and the table ------------------------------------------------------------

def test_json_says_what_the_hardware_text_changed(capsys: pytest.CaptureFixture[str]) -> None:
    text = "H100 SXM 96GB @ 500 W"
    code, out, _ = _plan(capsys, *PLAN[1:], "--hardware", text)
    res = json.loads(out)
    assert code == 0 and res["hardware"] == "h100-sxm" and res["hardware_text"] == text
    assert any("memory 96 GB" in n for n in res["hardware_notes"])
    assert any("power cap 500 W" in n for n in res["hardware_notes"])
    code, out, _ = _plan(capsys, *PLAN[1:], "--hardware", "h100-sxm")
    res = json.loads(out)
    assert res["hardware_text"] == "h100-sxm" and res["hardware_notes"] == []


def test_workload_json_says_what_the_hardware_text_changed(capsys: pytest.CaptureFixture[str]) -> None:
    text = "H100 SXM 96GB @ 500 W"
    code, out, _ = _plan(capsys, "--workload", "mlp_tiny", "--devices", "2", "--hardware", text, "--json")
    res = json.loads(out)
    assert code == 0 and res["hardware_text"] == text and any("memory 96 GB" in n for n in res["hardware_notes"])


def test_table_header_names_the_modified_memory_and_lists_the_readings(capsys: pytest.CaptureFixture[str]) -> None:
    text = "H100 SXM 96GB @ 500 W"
    code, out, err = _plan(capsys, *[a for a in PLAN[1:] if a != "--json"], "--hardware", text)
    assert code == 0
    header = out.split("fitting layouts")[0]
    assert "96GB" in header and "80GB" not in header
    assert "memory 96 GB from the text" in header and "power cap 500 W" in header
    assert "note: --hardware" not in err  # said once, in the header


# -- 4. options given but not read ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "named"), [
    ([*PLAN[1:], "--fp8-recipe", "rowwise"], "--fp8-recipe rowwise"),
    ([*PLAN[1:], "--hardware", "b200", "--precision", "fp4", "--fp8-recipe", "rowwise"], "--fp8-recipe rowwise"),
    ([*PLAN[1:], "--sort", "cost"], "--sort cost"),
    ([*PLAN[1:], "--tokens", "1e9"], "--tokens 1e+09"),
    ([*PLAN[1:], "--threads", "2"], "--threads 2"),
    ([*PLAN[1:], "--out", "x.toml"], "--out x.toml"),
    ([*PLAN[1:], "--name", "mine"], "--name mine"),
    ([*PLAN[1:], "--set", "train.lr=1"], "--set train.lr=1"),
    (["--model", "llama3-8b", "--compare-hardware", "h100:8,h200:8", "--devices", "8", "--json"], "--devices 8"),
    (["--model", "llama3-8b", "--compare-hardware", "h100:8,h200:8", "--hardware", "h200", "--json"],
     "--hardware h200"),
    (["--workload", "mlp_tiny", "--devices", "2", "--model", "llama3-8b", "--json"], "--model llama3-8b"),
    (["--workload", "mlp_tiny", "--devices", "2", "--precision", "fp16", "--json"], "--precision fp16"),
    (["--workload", "mlp_tiny", "--devices", "2", "--framework", "fsdp2", "--json"], "--framework fsdp2"),
    (["--from-csv", "data/perfmodel/published_dev.csv", "--model", "llama3-8b", "--json"], "--model llama3-8b"),
    (["--from-csv", "data/perfmodel/published_dev.csv", "--hardware", "h200", "--json"], "--hardware h200"),
    (["--from-csv", "data/perfmodel/published_dev.csv", "--devices", "8", "--json"], "--devices 8"),
])
def test_an_option_the_mode_does_not_read_is_named(argv: list[str], named: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _plan(capsys, *argv)
    assert code == 0
    json.loads(out)  # stdout stays JSON
    (line,) = [ln for ln in err.splitlines() if ln.startswith(f"stride plan: note: {named} ")]
    assert "is ignored" in line


@pytest.mark.parametrize("argv", [
    [*PLAN[1:], "--precision", "fp8", "--fp8-recipe", "rowwise"],
    [*PLAN[1:], "--hardware", "h100-sxm"],  # the default, given: not told apart, never noted
    ["--model", "llama3-8b", "--compare-hardware", "h100,h200:8", "--devices", "8", "--sort", "cost",
     "--tokens", "1e9", "--json"],  # a bare entry takes --devices
    ["--workload", "mlp_tiny", "--devices", "2", "--set", "train.batch_size=32", "--global-batch", "32", "--json"],
])
def test_options_that_are_read_are_not_noted(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _plan(capsys, *argv)
    assert code == 0 and "is ignored" not in err
    json.loads(out)


# -- 5. a partial --efficiency takes the rest from the shipped fit --------------------------------------------------

def test_a_partial_efficiency_file_is_filled_from_the_shipped_fit(tmp_path: Path) -> None:
    shipped = shipped_efficiency()
    (tmp_path / "empty.json").write_text("{}")
    assert load_efficiency(tmp_path / "empty.json") == shipped
    (tmp_path / "one.json").write_text(json.dumps({"efficiency": {"gemm": 0.71}}))
    eff = load_efficiency(tmp_path / "one.json")
    assert eff.gemm == 0.71 and eff.to_dict() == {**shipped.to_dict(), "gemm": 0.71}
    assert load_efficiency(tmp_path / "one.json", base=Efficiency()) == Efficiency(gemm=0.71)


def test_plan_with_a_partial_efficiency_says_which_factors_came_from_the_shipped_fit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, plain, _ = _plan(capsys, *PLAN[1:])
    (tmp_path / "empty.json").write_text("{}")
    code, out, err = _plan(capsys, *PLAN[1:], "--efficiency", str(tmp_path / "empty.json"))
    assert code == 0
    assert json.loads(out)["best"]["step_time_s"] == json.loads(plain)["best"]["step_time_s"]
    (tmp_path / "some.json").write_text(json.dumps({"gemm": 0.7, "memory": 0.8}))
    code, _, err = _plan(capsys, *PLAN[1:], "--efficiency", str(tmp_path / "some.json"))
    (line,) = [ln for ln in err.splitlines() if "shipped fit" in ln]
    assert line.startswith("stride plan: note:") and "some.json" in line
    missing = line.split("does not set ")[1].split(":")[0].split(", ")
    assert set(missing) == set(Efficiency().to_dict()) - {"gemm", "memory"}


def test_unknown_efficiency_keys_stay_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"gemm": 0.7, "gemmm": 0.8}))
    code, out, err = _plan(capsys, *PLAN[1:], "--efficiency", str(tmp_path / "bad.json"))
    assert code == 2 and out == "" and "unknown efficiency factor(s) ['gemmm']" in err


# -- 6. calibrate on fewer runs than factors ---------------------------------------------------------------------

SLOW_CPU = """[hardware.slow-cpu]
base = "epyc-9654"
peak_tflops = { fp32 = 0.16, bf16 = 1.2 }
memory_bw_tbps = 0.0125
kernel_overhead_us = 1.0
"""


def test_calibrating_more_factors_than_runs_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "hw.toml").write_text(SLOW_CPU)
    d = tmp_path / "one"
    d.mkdir()
    cfg = load_config(overrides=["model.name=ts_transformer", "model.size=tiny", "data.seq_len=32",
                                 "train.batch_size=16", "data.n_steps=1024"])
    (d / "config.toml").write_text(config_to_toml(cfg))
    (d / "summary.json").write_text(json.dumps({"step_time_s": 1.0, "world_size": 1}))
    hw = load_catalog(tmp_path / "hw.toml").get("slow-cpu")
    step = run_inputs(d).predict(hw, Efficiency(gemm=0.5, memory=0.6, dispatch=0.3)).step_time_s
    (d / "summary.json").write_text(json.dumps({"step_time_s": step, "world_size": 1}))
    code, out, err = _plan(capsys, "calibrate", str(d), "--hardware", "slow-cpu", "--hardware-file",
                           str(tmp_path / "hw.toml"))
    res = json.loads(out)
    assert code == 0 and abs(res["runs"][0]["err_pct"]) < 0.1  # the near-zero error that says nothing
    (line,) = [w for w in res["warnings"] if "underdetermined" in w]
    assert "1 run(s) fit 4 factor(s)" in line and "not measurements" in line
    assert f"stride plan calibrate: warning: {line}" in err


# -- 7. a part without the precision's peak ---------------------------------------------------------------------

def test_v100_with_bf16_suggests_fp16(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _plan(capsys, *PLAN[1:], "--hardware", "v100")
    assert code == 2 and "has no bf16 peak" in err and "pass --precision fp16" in err
    code, out, _ = _plan(capsys, *PLAN[1:], "--hardware", "v100", "--precision", "fp16")
    assert code == 0 and json.loads(out)["best"] is not None
    code, out, _ = _plan(capsys, "--model", "llama3-8b", "--compare-hardware", "v100:8,h100:8", "--json")
    (row,) = [r for r in json.loads(out)["hardware"] if r["hardware"] == "v100"]
    assert "pass --precision fp16" in row["reason"]


def test_a_workload_without_the_peak_suggests_its_setting(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _plan(capsys, "--workload", "mlp_tiny", "--devices", "2", "--hardware", "v100",
                         "--set", "train.precision=bf16")
    assert code == 2 and "pass --set train.precision=fp16" in err


# -- 8. no layout fits: exit 1 whichever the output ------------------------------------------------------------

def test_no_fit_exits_1_with_json_too(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _plan(capsys, "--model", "llama3-405b", "--devices", "1")
    assert code == 1 and "no layout fits" in out
    code, out, _ = _plan(capsys, "--model", "llama3-405b", "--devices", "1", "--json")
    res = json.loads(out)
    assert code == 1 and res["best"] is None and res["fastest_not_fitting"]


# -- 9. --compare-hardware takes catalog names --------------------------------------------------------------------

def test_compare_with_a_described_part_says_it_takes_catalog_names(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _plan(capsys, "--model", "llama3-8b", "--compare-hardware", "H100 SXM 96GB @ 500 W:64")
    assert code == 2 and out == ""
    assert "unknown hardware `H100 SXM 96GB @ 500 W`" in err and "catalog names only" in err
    assert "--list-hardware" in err and "--hardware-file" in err
