"""PCIe, workstation, consumer and older parts in the catalog (added 2026-12-06): a row naming one is answered from
its own datasheet figures, never another form of the part (an SXM board's NVLink and clocks), and the parts still
missing are refused by name."""

from __future__ import annotations

import math

import pytest

from stride.perfmodel.efficiency import EFFICIENCY_FILE, load_efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.hw_text import link_gbytes_per_device, resolve
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
    # added later from the vendors' documents (Trainium re-read in the AWS Neuron docs; the rest recalled)
    "AWS Trainium": ("trainium", 95, 16, 96),  # one NeuronCore-v2, half a chip (190 TFLOP/s, 32 GiB a chip)
    "trn1.32xlarge (NeuronCore-v2)": ("trainium", 95, 16, 96),
    "GeForce RTX 5090": ("rtx-5090", 209.5, 32, 64),  # FP32 accumulate: half the FP16-accumulate 419
    "RTX PRO 6000 Blackwell Server Edition": ("rtx-pro-6000-blackwell", 500, 96, 64),
    "RTX PRO 6000 Blackwell Workstation Edition 96GB": ("rtx-pro-6000-blackwell", 500, 96, 64),
    "RTX A5000": ("rtx-a5000", 111.1, 24, 32),
    "NVIDIA RTX A4000": ("rtx-a4000", 76.7, 16, 32),
    "L20 48GB": ("l20", 119.5, 48, 32),
    "H200 NVL": ("h200-nvl", 835.5, 141, 450),
    "HGX B100": ("b100", 1750, 192, 900),
    "AMD Instinct MI100": ("mi100", 92.3, 32, 32),  # CDNA1: bf16 at half the fp16 matrix rate (184.6)
    "MI250": ("mi250", 181, 64, 50),  # one GCD, as the MI250X
    "TPU v2-8": ("tpu-v2", 45, 16, 62),
    "Google TPU7x (Ironwood)": ("tpu7x", 2307, 192, 600),  # one chip (JAX shows two devices a chip)
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


@pytest.mark.parametrize(("text", "named"), [("RTX 5080", "`RTX 5080`"), ("RTX 5090 Ti", "`RTX 5090 TI`"),
                                             ("RTX 5090 D", "`RTX 5090 D`"), ("Quadro RTX 6000", "`RTX 6000`"),
                                             ("RTX 5000 Ada", "`RTX 5000 ADA`"), ("RTX A5000 Ada", "`RTX A5000 ADA`"),
                                             ("RTX 4000 Ada", "`RTX 4000 ADA`"), ("RTX A2000", "`RTX A2000`"),
                                             ("Trainium2", "`TRAINIUM2`"), ("trn2.48xlarge", "`TRN2`"),
                                             ("Titan RTX", "`RTX`"), ("RTX 2080 Ti", "`RTX 2080`")])
def test_parts_still_missing_are_refused_by_name(text: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        resolve(text, CAT)


@pytest.mark.parametrize(("text", "name"), [("RTX 5090", "rtx-5090"), ("RTX 4090", "rtx-4090"), ("B100", "b100"),
                                            ("B200", "b200"), ("MI250", "mi250"), ("MI250X", "mi250x"),
                                            ("A5000", "rtx-a5000"), ("RTX 6000 Ada", "rtx-6000-ada"),
                                            ("A6000", "rtx-a6000"), ("RTX PRO 6000", "rtx-pro-6000-blackwell"),
                                            ("H200 NVL", "h200-nvl"), ("H200", "h200"), ("H100 NVL", "h100-nvl"),
                                            ("L20", "l20"), ("L40", "l40"), ("TPU v2", "tpu-v2"), ("TPU v3", "tpu-v3"),
                                            ("TPU v6e", "tpu-v6e"), ("TPU v5p", "tpu-v5p"), ("TPU 70B run", None)])
def test_a_new_part_does_not_catch_its_near_namesakes(text: str, name: str | None) -> None:
    if name is None:  # a TPU size, not a part: no TPU7x
        with pytest.raises(ValueError):
            resolve(text, CAT)
        return
    assert resolve(text, CAT)[0].name == name


# texts as papers write them (no alias matches them whole: the family rules of hw_text read them; review M5)
@pytest.mark.parametrize(("text", "name"), [
    ("NVIDIA B100 192GB", "b100"), ("NVIDIA B200 180GB", "b200"), ("NVIDIA L20 48GB PCIe", "l20"),
    ("NVIDIA L40 48GB", "l40"), ("AMD MI250 OAM", "mi250"), ("AMD Instinct MI250X OAM", "mi250x"),
    ("AMD Instinct MI100 32GB", "mi100"), ("NVIDIA H200 NVL 141GB", "h200-nvl"), ("NVIDIA H200 SXM 141GB", "h200"),
    ("NVIDIA GeForce RTX 5090 32GB", "rtx-5090"), ("NVIDIA RTX A5000 24GB", "rtx-a5000"),
    ("NVIDIA RTX A4000 16GB", "rtx-a4000"), ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-blackwell"),
    ("Cloud TPU v2 Pod", "tpu-v2"), ("Ironwood TPU (tpu7x-4x4x4)", "tpu7x"), ("TPU v7", "tpu7x"),
    # blind round 30's transcription: a v6e entry with Ironwood's figures, named in parentheses
    ("TPU v6e 2307 TFLOPS 192GB 7.37TB/s (Ironwood TPU7x, tpu7x-4x4x4)", "tpu7x"),
])
def test_a_new_part_written_as_papers_write_it_reads_as_its_entry(text: str, name: str) -> None:
    assert resolve(text, CAT)[0].name == name


def test_the_max_q_rtx_pro_6000_runs_at_300_w() -> None:
    full, _ = resolve("RTX PRO 6000 Blackwell Workstation Edition", CAT)
    maxq, notes = resolve("RTX PRO 6000 Blackwell Max-Q Workstation Edition", CAT)
    assert maxq.peak_tflops["bf16"] == pytest.approx(full.peak_tflops["bf16"] * (300 / 600) ** (1 / 3))
    assert any("300 W" in n for n in notes)


@pytest.mark.parametrize(("text", "chips"), [("TPU v2-32", 16), ("TPU v3-128", 64)])
def test_a_tpu_v2_or_v3_slice_counts_tensorcores(text: str, chips: int) -> None:
    hw, notes = resolve(text, CAT)
    assert hw.scaleup_domain == chips and any("TPU slice" in n for n in notes)


TRN1_ROW_GPU = ("AWS Trainium (trn1.32xlarge/trn1n.32xlarge as the table writes it; 16 Trainium chips = 32 "
                "NeuronCore-v2 per instance; the table's TP/PP/DP count NeuronCores, 1 device here = 1 NeuronCore-v2, "
                "2 per Trainium chip)")


def test_a_neuron_table_row_reads_as_one_neuroncore_with_the_trn1_links() -> None:
    hw, notes = resolve(TRN1_ROW_GPU, CAT)
    assert hw.name == "trainium" and hw.peak_tflops["bf16"] == 95 and hw.memory_gib == 16
    assert hw.memory_bw_tbps == pytest.approx(0.41) and hw.scaleup_domain == 32
    assert hw.scaleout_bw_gbps == pytest.approx(800 / 8 / 32)  # EFA 800 Gb/s a trn1.32xlarge over 32 NeuronCores
    assert any("one NeuronCore-v2" in n for n in notes) and any("both named" in n for n in notes)


def test_a_trn1n_doubles_the_neuronlink_and_efa_of_a_neuroncore() -> None:
    hw, notes = resolve("trn1n.32xlarge", CAT)
    assert (hw.scaleup_bw_gbps, hw.scaleout_bw_gbps) == (192, pytest.approx(1600 / 8 / 32))


@pytest.mark.parametrize("text", ["Trainium chip", "16 Trainium chips", "AWS Trainium (per chip)",
                                  "16 Trainium devices", "Trainium accelerators (16 per trn1.32xlarge)",
                                  "Trn1, 16 accelerators", "Trainium (16 per instance)"])
def test_trainium_counted_in_chips_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="NeuronCore"):
        resolve(text, CAT)


def test_a_trainium_chip_memory_is_read_per_neuroncore() -> None:
    hw, notes = resolve("Trainium 32GB", CAT)
    assert hw.memory_gib == 16 and any("chip's" in n for n in notes)


def test_efa_per_instance_named_by_its_instance_size_is_the_nodes() -> None:
    text = "EFA: 800 Gbps (trn1.32xlarge) or 1600 Gbps (trn1n.32xlarge); table names both instance types"
    assert link_gbytes_per_device(text, 32) == pytest.approx(100 / 32)


@pytest.mark.parametrize("text", ["AWS Elastic Fabric Adapter (EFA), 400 Gbps",
                                  "AWS Elastic Fabric Adapter (EFA) with GPUDirect, 400 Gb/s per instance",
                                  "400 Gb/s InfiniBand per instance"])
def test_a_bare_efa_rate_or_one_per_instance_is_the_nodes(text: str) -> None:
    # AWS quotes EFA per instance (p4d.24xlarge: 400 Gb/s for 8 A100): 6.25 GB/s a GPU, not 50
    assert link_gbytes_per_device(text, 8) == pytest.approx(50 / 8)


@pytest.mark.parametrize(("text", "per_node", "gbytes"), [
    ("EFA, 400 Gbps per GPU", 8, 50), ("400 Gbps EFA per H100", 8, 50), ("EFA 200 Gbps per NeuronCore", 32, 25),
    ("400 Gb/s per 16 GPUs EFA", 16, 50 / 16)])
def test_an_efa_rate_said_to_be_a_devices_stays_the_devices(text: str, per_node: int, gbytes: float) -> None:
    assert link_gbytes_per_device(text, per_node) == pytest.approx(gbytes)


@pytest.mark.parametrize(("text", "gbytes"), [("p5.48xlarge EFA 3.2 Tbps", 50), ("ml.p4d.24xlarge 400 Gbps", 6.25)])
def test_an_instance_size_is_no_nic_count(text: str, gbytes: float) -> None:
    assert link_gbytes_per_device(text, 8) == pytest.approx(gbytes)


@pytest.mark.parametrize(("text", "gbytes"), [("NeuronLink-v2 384 GB/s", 96), ("NeuronLink 768 GB/s (trn1n)", 192),
                                              ("NeuronLink-v2 192 GB/s per direction per NeuronCore", 192)])
def test_a_neuronlink_rate_is_a_chips_both_ways_split_over_its_two_neuroncores(text: str, gbytes: float) -> None:
    assert link_gbytes_per_device(text, 32, scale_up=True) == pytest.approx(gbytes)


def test_mi250_package_memory_is_read_per_gcd() -> None:
    hw, notes = resolve("MI250 128GB", CAT)
    assert hw.memory_gib == 64 and any("two GCDs" in n for n in notes)


ROW = dict(row_id="p", source="t", model="GPT-2 124M", arch="GPT-2 (LayerNorm, GELU, learned positions, tied)",
           layers="12", hidden="768", heads="12", kv_heads="12", ffn_hidden="3072", ffn_act="gelu", vocab="50257",
           seq_len="1024", global_batch_seqs="64", micro_batch="32", num_gpus="2", gpus_per_node="2", tp="1", pp="1",
           dp="2", cp="1", zero_or_fsdp="none", recompute="none", precision="bf16", framework="PyTorch DDP")


@pytest.mark.parametrize("text", ["RTX 4090", "RTX 3090", "A10G", "L4", "A100 PCIe 40GB", "MI250X", "H20", "RTX 5090",
                                  "RTX A5000", "RTX A4000", "L20", "MI100", "MI250", "Trainium NeuronCore-v2"])
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


@pytest.mark.parametrize(("text", "predecessor"), [("RTX PRO 6000 Blackwell", "RTX 6000 Ada"), ("H200 NVL", "H100 NVL"),
                                             ("B100", "H100 SXM")])
def test_a_new_faster_part_is_answered_faster_than_its_predecessor(text: str, predecessor: str) -> None:
    eff = load_efficiency(EFFICIENCY_FILE)
    out = predict_row({**ROW, "gpu": text}, CAT, eff)
    assert out.get("reason") is None, out.get("reason")
    assert out["tokens_per_s_per_gpu"] > predict_row({**ROW, "gpu": predecessor}, CAT, eff)["tokens_per_s_per_gpu"]


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
    with pytest.raises(ValueError, match="`RTX A2000`"):
        resolve("RTX A2000 (Ampere)", CAT)


@pytest.mark.parametrize("gpu", [TRN1_ROW_GPU, "RTX 5090", "RTX PRO 6000 Blackwell", "RTX A5000", "RTX A4000", "L20",
                                 "H200 NVL", "B100", "MI100", "MI250", "TPU v2"])
def test_a_plan_runs_on_each_new_part(gpu: str) -> None:
    eff = load_efficiency(EFFICIENCY_FILE)
    row = {**ROW, "model": "Llama-2-7B", "arch": "llama", "layers": "32", "hidden": "4096", "heads": "32",
           "kv_heads": "32", "ffn_hidden": "11008", "ffn_act": "swiglu", "vocab": "32000", "seq_len": "4096",
           "global_batch_seqs": "64", "micro_batch": "1", "num_gpus": "32", "gpus_per_node": "32", "tp": "8",
           "dp": "4", "zero_or_fsdp": "zero1", "recompute": "full", "precision": "fp16" if gpu == "MI100" else "bf16"}
    out = predict_row({**row, "gpu": gpu}, CAT, eff)
    assert out.get("reason") is None, out.get("reason")
    assert 0 < out["mfu"] < 1


@pytest.mark.parametrize("text", ["Ampere Altra", "Jetson AGX Orin (Ampere)", "GeForce Ampere laptop GPU"])
def test_an_ampere_that_is_no_datacenter_gpu_is_not_an_a100(text: str) -> None:
    with pytest.raises(ValueError):
        resolve(text, CAT)


def test_an_a800_pcie_keeps_its_pcie_link_and_is_not_said_nvlink() -> None:
    hw, notes = resolve("A800 PCIe 80GB", CAT)
    assert hw.scaleup_bw_gbps == 32 and not any("NVLink" in n for n in notes)


@pytest.mark.parametrize("text", ["H100 SXM -80GB", "H100 SXM 835 TFLOPS -80GB", "H100 SXM 80GB -3.35TB/s"])
def test_a_figure_with_a_minus_sign_is_refused(text: str) -> None:
    """Its digits were read and the sign dropped: a plan at 80 GB without a word (first-contact audit of 2026-12-06);
    a hyphen inside a name is no sign."""
    with pytest.raises(ValueError, match="is negative"):
        resolve(text, CAT)
    assert resolve("H100-SXM5-80GB", CAT)[0].memory_gib == 80

