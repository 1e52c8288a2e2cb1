"""PCIe, workstation, consumer and older parts in the catalog (added 2026-12-06): a row naming one is answered from
its own datasheet figures, never another form of the part (an SXM board's NVLink and clocks), and the parts still
missing are refused by name."""

from __future__ import annotations

import math

import pytest

from stride.perfmodel.efficiency import EFFICIENCY_FILE, load_efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.hw_text import resolve
from stride.perfmodel.predict_rows import predict_row

CAT = load_catalog()

# text -> (entry, dense 16-bit peak TFLOP/s at FP32 accumulate, memory GB, scale-up GB/s per direction)
PARTS = {
    "NVIDIA A100 PCIe 40GB": ("a100-pcie-40gb", 312, 40, 32),
    "A100 80GB PCIe": ("a100-pcie-80gb", 312, 80, 32),
    "A800 PCIe 80GB": ("a100-pcie-80gb", 312, 80, 32),  # the China A800 PCIe: no NVLink cut below PCIe
    "V100 PCIe 16GB": ("v100-pcie", 112, 16, 16),
    "A30": ("a30", 165, 24, 32),
    "NVIDIA A10": ("a10", 125, 24, 32),
    "A10G (AWS g5.48xlarge)": ("a10g", 70, 24, 32),
    "L4": ("l4", 121, 24, 32),
    "NVIDIA L40 48GB": ("l40", 181, 48, 32),
    "A40": ("a40", 149.7, 48, 32),
    "RTX A6000": ("rtx-a6000", 154.8, 48, 32),
    "A6000 Ada": ("rtx-6000-ada", 364.2, 48, 32),  # a common name of the RTX 6000 Ada (review M6)
    "RTX A6000 Ada": ("rtx-6000-ada", 364.2, 48, 32),
    "RTX 6000 Ada Generation": ("rtx-6000-ada", 364.2, 48, 32),
    "GeForce RTX 3090": ("rtx-3090", 71, 24, 32),  # GeForce: FP32 accumulate at half the FP16-accumulate rate
    "RTX 3090 Ti": ("rtx-3090-ti", 80, 24, 32),
    "2x RTX 4090 (450 W)": ("rtx-4090", 165.2, 24, 32),
    "Tesla T4": ("t4", 65, 16, 16),
    "H20 96GB": ("h20", 148, 96, 450),
    "MI250X": ("mi250x", 191.5, 64, 50),  # one GCD, as frameworks count devices
    "AMD Instinct MI210": ("mi210", 181, 64, 32),
    "TPU v3-32": ("tpu-v3", 123, 32, 70),
}


@pytest.mark.parametrize("text", sorted(PARTS))
def test_each_part_reads_as_its_own_entry(text: str) -> None:
    name, peak, mem, up = PARTS[text]
    hw, _ = resolve(text, CAT)
    assert hw.name == name
    assert hw.peak_tflops.get("bf16", hw.peak_tflops.get("fp16")) == pytest.approx(peak)
    assert (hw.memory_gib, hw.scaleup_bw_gbps) == (mem, up)
    assert hw.source and hw.vendor and hw.generation


def test_mi250x_package_memory_is_read_per_gcd() -> None:
    hw, notes = resolve("MI250X 128GB", CAT)
    assert hw.memory_gib == 64 and any("two GCDs" in n for n in notes)


@pytest.mark.parametrize(("text", "named"), [("RTX 5090", "`RTX 5090`"), ("MI250", "`MI250`"),
                                             ("RTX A5000", "`RTX A5000`"), ("Quadro RTX 6000", "`RTX 6000`"),
                                             ("TPU v2-8", "`TPU V2`"), ("MI100", "`MI100`")])
def test_parts_still_missing_are_refused_by_name(text: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        resolve(text, CAT)


ROW = dict(row_id="p", source="t", model="GPT-2 124M", arch="GPT-2 (LayerNorm, GELU, learned positions, tied)",
           layers="12", hidden="768", heads="12", kv_heads="12", ffn_hidden="3072", ffn_act="gelu", vocab="50257",
           seq_len="1024", global_batch_seqs="64", micro_batch="32", num_gpus="2", gpus_per_node="2", tp="1", pp="1",
           dp="2", cp="1", zero_or_fsdp="none", recompute="none", precision="bf16", framework="PyTorch DDP")


@pytest.mark.parametrize("text", ["RTX 4090", "RTX 3090", "A10G", "L4", "A100 PCIe 40GB", "MI250X", "H20"])
def test_a_small_ddp_run_on_each_part_is_answered_slower_on_the_slower_part(text: str) -> None:
    eff = load_efficiency(EFFICIENCY_FILE)
    out = predict_row({**ROW, "gpu": text}, CAT, eff)
    assert out.get("reason") is None, out.get("reason")
    tps, mfu = out["tokens_per_s_per_gpu"], out["mfu"]
    assert math.isfinite(tps) and tps > 0 and 0 < mfu < 1
    assert out["tokens_per_s_per_gpu_lo"] <= tps <= out["tokens_per_s_per_gpu_hi"]
    # the same run on an A100 SXM (312 dense, 2 TB/s, NVLink) is at least as fast as on any of these
    sxm = predict_row({**ROW, "gpu": "A100 SXM4 80GB"}, CAT, eff)["tokens_per_s_per_gpu"]
    assert tps <= sxm * 1.02


def test_t4_runs_fp16_and_refuses_bf16() -> None:
    eff = load_efficiency(EFFICIENCY_FILE)
    assert predict_row({**ROW, "gpu": "T4", "precision": "fp16 mixed"}, CAT, eff).get("reason") is None
    assert "bf16" in (predict_row({**ROW, "gpu": "T4"}, CAT, eff).get("reason") or "")


@pytest.mark.parametrize(("text", "name"), [("NVIDIA Ampere GPUs (part not named in the paper)", "a100-80gb"),
                                            ("Hopper GPUs", "h100-sxm")])
def test_a_generation_named_without_its_part_is_its_training_part_noted_as_assumed(text: str, name: str) -> None:
    hw, notes = resolve(text, CAT)
    assert hw.name == name and any("part not named" in n and "assumed" in n for n in notes)


def test_a_named_part_missing_from_the_catalog_is_not_taken_for_its_generation() -> None:
    with pytest.raises(ValueError, match="`RTX A5000`"):
        resolve("RTX A5000 (Ampere)", CAT)


@pytest.mark.parametrize("text", ["Ampere Altra", "Jetson AGX Orin (Ampere)", "GeForce Ampere laptop GPU"])
def test_an_ampere_that_is_no_datacenter_gpu_is_not_an_a100(text: str) -> None:
    with pytest.raises(ValueError):
        resolve(text, CAT)


def test_an_a800_pcie_keeps_its_pcie_link_and_is_not_said_nvlink() -> None:
    hw, notes = resolve("A800 PCIe 80GB", CAT)
    assert hw.scaleup_bw_gbps == 32 and not any("NVLink" in n for n in notes)
