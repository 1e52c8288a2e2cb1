"""`stride plan` as a first-time user meets it (first-contact audit of 2026-12-06): a TPU is planned with JAX/XLA's
profile unless told otherwise, a family name lists its parts, and a TPU slice that is not --devices is said."""

from __future__ import annotations

import json

import pytest
from test_perfmodel_row_variants import BASE  # the same base row; pytest puts this folder on sys.path

from stride.cli.main import main
from stride.config.errors import ConfigError
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.model_spec import PRESETS
from stride.perfmodel.planner import compare_hardware, search
from stride.perfmodel.published import row_inputs


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


# --- an outside audit of the planner (2026-12-06) ------------------------------------------------------------------


def test_a_block_scaled_recipe_needs_its_tensor_cores() -> None:
    cat, spec = load_catalog(), PRESETS["llama3-8b"]
    with pytest.raises(ConfigError, match="mxfp8.*block-scaled tensor cores"):
        search(spec, cat.get("h100-sxm"), 8, 64, None, "fp8", "megatron", "mxfp8")
    assert search(spec, cat.get("b200"), 8, 64, None, "fp8", "megatron", "mxfp8").best is not None
    row = {**BASE, "gpu": "H100 SXM", "precision": "MXFP8 (torchao)", "framework": "torchtitan"}
    assert "block-scaled tensor cores" in (row_inputs(row, cat).reason or "")
    blockwise = {**row, "precision": "FP8 blockwise (1x128 tiles, 128x128 weight blocks)"}  # Hopper runs it
    assert row_inputs(blockwise, cat).reason is None


def test_the_planner_interleaves_over_more_than_two_chunks() -> None:
    """Llama 3 405B's 126 blocks on pp16 x v8 (the embedding and loss as chunks): the search had only v2."""
    from stride.perfmodel.planner import candidate_layouts

    cat = load_catalog()
    lays = candidate_layouts(PRESETS["llama3-405b"], cat.get("h100-sxm"), 8192, 2048)
    chunks = {(lay.pp, lay.vpp) for lay in lays if lay.schedule == "interleaved"}
    assert (16, 8) in chunks and (8, 8) in chunks
    assert all(lay.stage_split in ("even", "embedding-loss") for lay in lays if lay.schedule == "interleaved")


def test_compare_says_when_the_fleets_ran_different_batches(capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", "--model", "llama3-8b", "--compare-hardware", "h100-sxm:64,h100-sxm:1024"]) == 0
    out = capsys.readouterr().out
    assert "global batch" in out and "ran different global batches" in out
    assert main(["plan", "--model", "llama3-8b", "--compare-hardware", "h100-sxm:64,h100-sxm:1024",
                 "--global-batch", "1024"]) == 0
    assert "ran different global batches" not in capsys.readouterr().out


def test_the_mfu_column_names_a_low_precision_peak_and_tf32_plans(capsys: pytest.CaptureFixture) -> None:
    assert main(["plan", "--model", "llama3-8b", "--devices", "8", "--precision", "fp8"]) == 0
    assert "MFU (fp8 peak)" in capsys.readouterr().out
    assert main(["plan", "--model", "llama3-8b", "--devices", "8", "--hardware", "a100-80gb", "--precision",
                 "tf32"]) == 0
    assert "tf32" in capsys.readouterr().out


def test_an_interval_from_every_part_says_so() -> None:
    from stride.perfmodel.intervals import load_intervals, run_kind

    table = load_intervals()
    # MI355X (CDNA4): no development row of its kind (MI300X's CDNA3 has its own since rounds 7-25 joined them)
    mi355x = table.bounds(run_kind("cdna4", "bf16", "megatron", False))[2]
    assert mi355x.startswith("*|") and "no cdna4 rows of this kind: every part's" in mi355x
    assert "every part's" not in table.bounds(run_kind("hopper", "bf16", "megatron", False))[2]
