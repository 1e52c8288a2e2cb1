"""The hardware catalog: seeded values, user overrides, and clear errors."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from shared_data import PERFMODEL, need_shared

from stride.config.errors import ConfigError
from stride.perfmodel.hardware import load_catalog

SHARED = PERFMODEL


def test_catalog_loads_every_seeded_device() -> None:
    cat = load_catalog()
    assert len(cat.devices) == 55
    assert all(hw.source and hw.vendor and hw.generation for hw in cat.devices.values())
    for name in ("h100-pcie", "h100-nvl", "h200", "b200", "b300", "gb300", "mi300x", "mi325x", "mi355x", "tpu-v4",
                 "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x", "gaudi3", "l40s", "gaudi2", "mi350x"):
        assert cat.get(name).peak_flops("bf16") > 0
    aliases = [a.lower() for hw in cat.devices.values() for a in hw.aliases]
    assert len(aliases) == len(set(aliases)), "an alias names two devices"
    assert cat.get("H100-SXM5-80GB (assumed)").name == "h100-sxm"
    assert cat.get("a100 sxm4 80gb").peak_flops("bf16") == 312e12
    assert cat.get("gb200").scaleup_domain == 72
    # a GH200 is its own part (H100 compute, 96 GB HBM3 at 4 TB/s), not an H200 or a GB200
    gh = cat.get("GH200 (NVIDIA Grace-Hopper superchips, Alps 'Clariden' vCluster, CSCS)")
    assert (gh.name, gh.memory_gib, gh.peak_flops("bf16")) == ("gh200", 96, cat.get("h100-sxm").peak_flops("bf16"))
    assert cat.get("H200").name == "h200" and cat.get("GB200").name == "gb200"
    # the air-cooled MI350X is its own part (the MI355X's die at a lower clock), not an alias of the MI355X
    assert cat.get("MI350X").name == "mi350x"
    assert cat.get("mi350x").peak_flops("bf16") < cat.get("mi355x").peak_flops("bf16")


def test_catalog_matches_the_shared_datasheet_csv() -> None:
    path = need_shared(SHARED / "hardware.csv")
    rows = {r["device"]: r for r in csv.DictReader(path.open())}
    cat = load_catalog()
    pairs = {"A100-80GB": "a100-80gb", "H100-SXM5-80GB": "h100-sxm", "H200-SXM-141GB": "h200", "MI300X": "mi300x"}
    for dev, name in pairs.items():
        hw, row = cat.get(name), rows[dev]
        assert hw.peak_tflops["bf16"] == float(row["peak_dense_bf16_tflops"])
        assert hw.memory_bw_tbps == float(row["mem_bw_tbps"])
        assert hw.scaleup_bw_gbps == float(row["scaleup_bw_gbps_bidir_per_device"].split()[0]) / 2


def test_override_file_inherits_and_replaces(tmp_path: Path) -> None:
    f = tmp_path / "hw.toml"
    f.write_text('[hardware.my-h100]\nbase = "h100-sxm"\nmatmul_efficiency = 0.71\nscaleout_bw_gbps = 45.0\n'
                 '[hardware.a100-80gb]\nprice_per_hour_usd = 1.1\n')
    cat = load_catalog(f)
    mine = cat.get("my-h100")
    assert (mine.matmul_efficiency, mine.scaleout_bw_gbps, mine.memory_gib) == (0.71, 45.0, 80)
    assert cat.get("h100").scaleout_bw_gbps == 50  # the base is untouched, its aliases stay its own
    assert cat.get("a100-80gb").price_per_hour_usd == 1.1


@pytest.mark.parametrize(("body", "message"), [
    ('[hardware.x]\nbase = "h100-sxm"\nmemroy_gib = 3\n', "unknown key `memroy_gib`"),
    ('[hardware.x]\nbase = "h100-sxm"\nmemory_gib = -1\n', "memory_gib must be a number >= 0"),
    ('[hardware.x]\nbase = "nope"\n', "base `nope` is not in the catalog"),
    ('[hardware.x]\nmemory_gib = 8\n', "missing"),
    ('[hardware.x]\nbase = "h100-sxm"\npeak_tflops = { bf61 = 3 }\n', "unknown dtype `bf61`"),
    ("not toml [", "not valid TOML"),
])
def test_bad_override_files_name_the_problem(tmp_path: Path, body: str, message: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(body)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_catalog(f)


def test_unknown_device_and_missing_dtype() -> None:
    cat = load_catalog()
    with pytest.raises(ConfigError, match="did you mean"):
        cat.get("h100-sxn")
    with pytest.raises(ConfigError, match="no fp8 peak"):
        cat.get("a100-80gb").peak_flops("fp8")
