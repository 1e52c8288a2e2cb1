"""Every kind of free text a source writes, read into model inputs, and the refusals with the
input they name."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.hw_text import link_gbytes_per_device, resolve
from stride.perfmodel.layout import stage_blocks
from stride.perfmodel.published import row_inputs
from stride.perfmodel.row_text import activation, moe, precision, recompute, zero_stage

DATA = Path(__file__).resolve().parents[2] / "data" / "perfmodel"
CAT = load_catalog()


@pytest.mark.parametrize(("text", "name", "checks"), [
    ("H100-SXM 96GB HBM2e 2.4TB/s @500W", "h100-sxm",
     {"memory_gib": 96, "memory_bw_tbps": 2.4, "bf16": 989.4 * (500 / 700) ** (1 / 3)}),
    ("B200-HGX-180GB", "b200", {"memory_gib": 180, "scaleup_domain": 8}),
    ("GB200-NVL72 (B200 GPU)", "gb200", {"scaleup_domain": 72, "bf16": 2500}),
    ("A100-SXM4 (80GB per GPU)", "a100-80gb", {"memory_gib": 80}),
    ("A100 40GB (a100_40gb)", "a100-40gb", {"memory_gib": 40}),
    ("H100-SXM5-80GB HBM3 @700W", "h100-sxm", {"bf16": 989.4, "memory_bw_tbps": 3.35}),
    ("GB300 NVL72", "gb300", {"scaleup_domain": 72, "fp4": 15000}),
    ("B300 HGX NVL16", "b300", {"scaleup_domain": 8}),
    ("H100 NVL", "h100-nvl", {"scaleup_domain": 2}),
    ("H100 PCIe", "h100-pcie", {"bf16": 756.5}),
    ("MI355X", "mi355x", {"memory_gib": 288}), ("MI325X", "mi325x", {}), ("Gaudi 3", "gaudi3", {"bf16": 1835}),
    ("L40S", "l40s", {"fp8": 733}), ("TPU v4 (v4-384 slice, 192 chips)", "tpu-v4", {"scaleup_domain": 192}),
    ("TPU v5p (v5p-128 slice, 64 chips)", "tpu-v5p", {"scaleup_domain": 64}),
    ("TPU v6e (Trillium) v6e-256", "tpu-v6e", {"bf16": 918}), ("V100 32GB (DGX-2, V100-SXM3)", "v100",
                                                             {"scaleup_domain": 16}),
    ("H100 SXM 989 TFLOPS", "h100-sxm", {"bf16": 989}),
])
def test_hardware_text_resolves_to_a_part_and_its_modifiers(text: str, name: str, checks: dict) -> None:
    hw, _ = resolve(text, CAT)
    assert hw.name == name
    for key, want in checks.items():
        got = hw.peak_tflops.get(key) if key in ("bf16", "fp8", "fp4") else getattr(hw, key)
        assert got == pytest.approx(want, rel=1e-3), (text, key)


def test_power_cap_and_a_missing_form_factor_are_noted() -> None:
    _, notes = resolve("H100-SXM 96GB HBM2e 2.4TB/s @500W", CAT)
    assert any("power cap 500 W" in n for n in notes)
    _, notes = resolve("H100 80GB", CAT)
    assert any("SXM assumed" in n for n in notes)


@pytest.mark.parametrize(("text", "says"), [("P100", "`P100` is not in the catalog"), ("Z9000", "not a part"),
                                            ("", "gpu is blank"), ("RTX 5080", "`RTX 5080` is not in the catalog")])
def test_unknown_parts_are_refused_by_name(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        resolve(text, CAT)


@pytest.mark.parametrize(("text", "per_node", "gbytes"), [
    ("8x HDR InfiniBand 200 Gb/s per node (Selene)", 8, 25.0), ("NDR 400 Gb/s per GPU", 8, 50.0),
    ("RoCE 1600 Gbps per node (8 x 200 Gbps)", 8, 25.0), ("NVLink3/NVSwitch 600 GB/s bidir per GPU", 8, 300.0),
    ("GCP A3 GPUDirect-TCPX, 4 x 200 Gbps per VM (NIC count not stated)", 8, 12.5),
    ("not stated (DGX H100: 8x400G NDR assumed)", 8, None), ("none", 8, None),
])
def test_link_text_gives_bandwidth_per_device(text: str, per_node: int, gbytes: float | None) -> None:
    got = link_gbytes_per_device(text, per_node)
    assert got == (pytest.approx(gbytes) if gbytes is not None else None)


@pytest.mark.parametrize(("text", "mode"), [
    ("full (uniform, every layer)", "full"), ("selective (attention core only)", "selective"),
    ("rematerialization (HFU>MFU)", "full"), ("none (activation_checkpointing=False)", "none"),
    ("full (FSDP activation_checkpointing=True)", "full"), ("remat_policy=minimal", "selective"),
    ("remat_policy=qkv_proj_offloaded (...)", "full-except-qkv"), ("remat_policy=save_dot_except_mlpwi", "mlp-in"),
    ("remat_policy=custom (q/k/v offloaded; the MLP rematerialized)", "mlp"), ("no recompute", "none"),
    ("activation checkpointing", "full"), ("not stated", None), ("", None),
])
def test_recompute_words(text: str, mode: str | None) -> None:
    assert recompute(text) == mode


def test_unreadable_recompute_is_an_error_naming_the_text() -> None:
    with pytest.raises(ValueError, match="recompute 'sometimes'"):
        recompute("sometimes")


@pytest.mark.parametrize(("text", "want"), [
    ("amp_bf16 (FSDP mixed_precision DEFAULT)", ("bf16", "delayed")),
    ("fp16 mixed (loss-scale 8192)", ("fp16", "delayed")),
    ("amp_fp8 (Transformer Engine fp8_autocast, delayed scaling)", ("fp8", "delayed")),
    ("fp8 (TE current scaling)", ("fp8", "current")), ("torchao float8 tensorwise", ("fp8", "tensorwise")),
    ("FP8 torchao rowwise", ("fp8", "rowwise")), ("float8 rowwise_with_gw_hp", ("fp8", "rowwise_gw_hp")),
    ("MXFP8", ("fp8", "mxfp8")), ("NVFP4 (Blackwell)", ("fp4", "nvfp4")),
])
def test_precision_and_low_precision_recipe(text: str, want: tuple[str, str]) -> None:
    assert precision(text)[:2] == want


@pytest.mark.parametrize(("text", "stage"), [("FSDP FULL_SHARD", 3), ("FSDP SHARD_GRAD_OP", 2), ("ZeRO-3", 3),
                                             ("DeepSpeed ZeRO stage 1", 1), ("distributed optimizer", 1),
                                             ("none (zero_stage=0)", 0), ("", 0)])
def test_zero_words(text: str, stage: int) -> None:
    assert zero_stage(text)[0] == stage


@pytest.mark.parametrize(("text", "act"), [("gelu", "gelu"), ("relu", "relu"), ("squared-relu", "squared-relu"),
                                           ("relu^2", "squared-relu"), ("silu", "silu"), ("swiglu", "swiglu"),
                                           ("geglu", "geglu"), ("gelu (assumed)", "gelu")])
def test_activations(text: str, act: str) -> None:
    assert activation(text, "")[0] == act


def test_moe_words() -> None:
    got = moe("Mixtral MoE: 8 experts, top-2, capacity factor 1.25 (token dropping), expert parallel 4")
    assert got == {"experts": 8, "top_k": 2, "capacity": 1.25, "ep": 4}
    assert moe("128 experts on every other layer, top-1")["moe_every"] == 2


def _base() -> dict:
    return dict(next(csv.DictReader((DATA / "published_dev.csv").open())))  # sc21t1-1


def test_squared_relu_and_gated_activations_change_the_model() -> None:
    row = {**_base(), "ffn_act": "squared-relu"}
    inp = row_inputs(row, CAT)
    assert inp.reason is None and inp.spec.act == "squared-relu" and not inp.spec.gated
    assert row_inputs({**_base(), "ffn_act": "geglu"}, CAT).spec.gated


def test_uneven_pipeline_stages() -> None:
    """Megatron-DeepSpeed and Megatron let end stages hold fewer blocks; 25 layers on pp 4 cannot split
    evenly, 30 can with the embedding and loss counted as stages (32 units / 4)."""
    row = {**_base(), "layers": "25", "tp": "1", "pp": "4", "dp": "8", "num_gpus": "32", "pp_schedule": "1F1B"}
    inp = row_inputs(row, CAT)
    assert inp.reason is None and inp.layout.stage_split == "uneven"
    assert stage_blocks(25, 4, 1, "uneven") == [6, 7, 6, 6]
    row30 = {**row, "layers": "30"}
    assert row_inputs(row30, CAT).layout.stage_split == "embedding-loss"
    assert stage_blocks(30, 4, 1, "embedding-loss") == [7, 8, 8, 7]


@pytest.mark.parametrize(("change", "reason"), [
    ({"layers": ""}, "`layers` is blank"), ({"gpu": "P100"}, "P100"), ({"ffn_act": "tanh"}, "ffn_act 'tanh'"),
    ({"num_gpus": ""}, "`num_gpus` is blank"), ({"seq_len": "x"}, "`seq_len` is 'x', not a number"),
    ({"arch": "GPT MoE model"}, "number of experts"), ({"dp": "3"}, "!= num_gpus"),
    ({"hidden": "1024", "vocab": ""}, "`vocab` is blank"), ({"recompute": "sometimes"}, "recompute"),
])
def test_rows_are_refused_naming_the_missing_input(change: dict, reason: str) -> None:
    inp = row_inputs({**_base(), **change}, CAT)
    assert inp.reason is not None and reason in inp.reason


def test_blank_optional_inputs_are_assumed_and_noted() -> None:
    row = {**_base(), "micro_batch": "", "heads": "", "ffn_hidden": "", "precision": "", "framework": "", "source": ""}
    inp = row_inputs(row, CAT)
    assert inp.reason is None
    text = " ".join(inp.notes)
    for word in ("micro_batch", "heads", "ffn_hidden", "precision", "framework"):
        assert word in text
    assert inp.spec.heads == 2304 // 128 and inp.layout.framework == "megatron" and not math.isnan(inp.spec.ffn)


def test_rematerialization_is_not_materialised_attention() -> None:
    row = {**_base(), "source": "x 2024", "framework": "JAX", "recompute": "rematerialization (the MLP rematerialized)"}
    assert row_inputs(row, CAT).layout.attention == "flash"
    assert row_inputs({**row, "notes": "attention materialized (no flash)"}, CAT).layout.attention == "materialized"
