"""The probed `local-cpu` entry carries this machine's figures for every dtype, none of its base part's.

Before: `stride plan probe` wrote fp32 and bf16 only, and the catalog merged the base part's peak table,
so a 2-core host was given the 96-core EPYC 9654's datasheet fp64 (3.7 TFLOP/s)."""

from __future__ import annotations

from pathlib import Path

from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.probe import hardware_toml

MEASURED = {"fp64_tflops": 0.031, "fp32_tflops": 0.062, "bf16_tflops": 0.15, "memory_bw_tbps": 0.0177,
            "kernel_overhead_us": 2.0, "fsdp_unit_overhead_us": 1600.0, "contention_slowdown": 1.1, "threads": 1}


def test_probed_entry_has_only_measured_peaks(tmp_path: Path) -> None:
    toml = tmp_path / "local.toml"
    toml.write_text(hardware_toml("local-cpu", MEASURED, cores=2))
    hw = load_catalog(toml).get("local-cpu")
    base = load_catalog().get("epyc-9654").peak_tflops
    assert set(hw.peak_tflops) == set(base)  # every dtype the base lists is measured
    assert hw.peak_tflops == {"fp64": 0.031, "fp32": 0.062, "bf16": 0.15}
