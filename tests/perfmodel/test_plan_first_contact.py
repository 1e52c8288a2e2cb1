"""`stride plan` as a first-time user meets it (first-contact audit of 2026-12-06): a TPU is planned with JAX/XLA's
profile unless told otherwise, a family name lists its parts, and a TPU slice that is not --devices is said."""

from __future__ import annotations

import json

import pytest

from stride.cli.main import main
from stride.config.errors import ConfigError
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.model_spec import PRESETS
from stride.perfmodel.planner import compare_hardware, search


def _plan_json(capsys: pytest.CaptureFixture, *argv: str) -> dict:
    assert main(["plan", "--model", "llama3-8b", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_tpu_is_planned_as_maxtext_a_gpu_as_megatron(capsys: pytest.CaptureFixture) -> None:
    tpu = _plan_json(capsys, "--devices", "64", "--hardware", "tpu-v5p")
    assert tpu["best"]["framework"] == "maxtext"
    gpu = _plan_json(capsys, "--devices", "8", "--hardware", "h100-sxm")
    assert gpu["best"]["framework"] == "megatron"
    named = _plan_json(capsys, "--devices", "64", "--hardware", "tpu-v5p", "--framework", "fsdp2")
    assert named["best"]["framework"] == "fsdp2"  # a named framework is kept


def test_compare_plans_each_part_with_its_own_framework() -> None:
    cat, spec = load_catalog(), PRESETS["llama3-8b"]
    fleet = [(cat.get("h100-sxm"), 8), (cat.get("tpu-v5p"), 8)]
    rows = {r["hardware"]: r for r in compare_hardware(spec, fleet, 64)}
    for hw, devices in fleet:
        own = search(spec, hw, devices, 64, None, "bf16", "maxtext" if hw.vendor == "google" else "megatron").best
        assert rows[hw.name]["layout"] == own.layout.short()
        assert rows[hw.name]["step_time_s"] == pytest.approx(own.step_time_s)


def test_a_family_name_lists_its_parts() -> None:
    with pytest.raises(ConfigError) as err:
        load_catalog().get("tpu")
    msg = str(err.value)
    assert "did you mean one of" in msg and all(f"`{n}`" in msg for n in ("tpu-v4", "tpu-v5p", "tpu-v6e", "tpu7x"))
    assert load_catalog().suggest("h100-sx") == " (did you mean `h100-sxm`?)"  # one match: as before


def test_a_slice_that_is_not_devices_is_said(capsys: pytest.CaptureFixture) -> None:
    out = _plan_json(capsys, "--devices", "8", "--hardware", "TPU v5p-128")
    assert any("slice of 64 chips but --devices is 8" in n for n in out["hardware_notes"])
    whole = _plan_json(capsys, "--devices", "64", "--hardware", "TPU v5p-128")
    assert not any("--devices is" in n for n in whole["hardware_notes"])
