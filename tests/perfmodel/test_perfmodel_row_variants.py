"""Free text as other people write it, many variants per kind: each either reads right or the row is
refused naming the input that is missing or not modelled. Written from the vocabulary of the public
docs of the frameworks and clouds (Megatron-LM/NeMo arguments, torchtitan/torchtune configs, MaxText
configs, PyTorch FSDP/DDP, DeepSpeed, AWS/GCP/Azure instance names), not from any result table."""

from __future__ import annotations

import pytest

from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.predict_rows import predict_row
from stride.perfmodel.published import row_inputs

CAT = load_catalog()
BASE = dict(
    row_id="v",
    source="a blog 2024",
    model="Llama 3 8B",
    arch="Llama 3 (RMSNorm, rotary, SwiGLU, GQA, untied)",
    layers="32",
    hidden="4096",
    heads="32",
    kv_heads="8",
    ffn_hidden="14336",
    ffn_act="swiglu",
    vocab="128256",
    seq_len="8192",
    global_batch_seqs="512",
    micro_batch="1",
    gpu="H100 SXM",
    num_gpus="64",
    gpus_per_node="8",
    intra_node_link="",
    inter_node_link="",
    tp="1",
    pp="1",
    dp="",
    cp="1",
    vpp="",
    sp="",
    zero_or_fsdp="FSDP",
    pp_schedule="",
    recompute="none",
    precision="bf16",
    framework="torchtitan",
    meas_tokens_per_s_per_gpu="7000",
)


def _read(**change: str):
    inp = row_inputs({**BASE, **change}, CAT)
    assert inp.reason is None, inp.reason
    return inp


HARDWARE = [
    ("8x H100", "h100-sxm", {}),
    ("8xH100", "h100-sxm", {}),
    ("1x H100", "h100-sxm", {}),
    ("H100s", "h100-sxm", {}),
    ("DGX H100", "h100-sxm", {"scaleup_domain": 8}),
    ("HGX H100 80GB", "h100-sxm", {}),
    ("NVIDIA H100 80GB HBM3", "h100-sxm", {}),
    ("H100-SXM5-80GB", "h100-sxm", {}),
    ("H100 SXM5 (700W)", "h100-sxm", {"bf16": 989.4}),
    ("H100 (2.4TB/s, 80 GB)", "h100-sxm", {"memory_bw_tbps": 2.4}),
    ("H800", "h100-sxm", {"scaleup_bw_gbps": 200}),
    ("H100 NVL 94GB", "h100-nvl", {}),
    ("nvidia-h100-mega-80gb", "h100-sxm", {}),
    ("p5.48xlarge", "h100-sxm", {"scaleout_bw_gbps": 50}),
    ("p4d.24xlarge", "a100-40gb", {"scaleout_bw_gbps": 6.25}),
    ("p4de.24xlarge", "a100-80gb", {}),
    ("p5e.48xlarge", "h200", {}),
    ("p5en.48xlarge", "h200", {}),
    ("A3 Mega", "h100-sxm", {"scaleout_bw_gbps": 25}),
    ("a3-megagpu-8g", "h100-sxm", {"scaleout_bw_gbps": 25}),
    ("a3-highgpu-8g", "h100-sxm", {"scaleout_bw_gbps": 12.5}),
    ("A3 Ultra", "h200", {"scaleout_bw_gbps": 50}),
    ("a2-highgpu-8g", "a100-40gb", {}),
    ("a2-ultragpu-8g", "a100-80gb", {}),
    ("A4 (B200)", "b200", {}),
    ("ND H100 v5", "h100-sxm", {"scaleout_bw_gbps": 50}),
    ("Standard_ND96isr_H100_v5", "h100-sxm", {}),
    ("ND96amsr A100 v4", "a100-80gb", {"scaleout_bw_gbps": 25}),
    ("ND96asr_v4", "a100-40gb", {}),
    ("TPU v5p-1024", "tpu-v5p", {"scaleup_domain": 512}),
    ("v5litepod-256", "tpu-v5e", {"scaleup_domain": 256}),
    ("TPU v4-4096", "tpu-v4", {"scaleup_domain": 2048}),
    ("Cloud TPU v6e-256 (Trillium)", "tpu-v6e", {"scaleup_domain": 256}),
    ("MI300X OAM", "mi300x", {}),
    ("AMD Instinct MI300X 192GB", "mi300x", {}),
    ("MI325X", "mi325x", {}),
    ("HGX B200 1000W", "b200", {"bf16": 2250}),
    ("NVIDIA B200 SXM 180GB", "b200", {}),
    ("DGX B200", "b200", {}),
    ("GB200 NVL72", "gb200", {"scaleup_domain": 72}),
    ("A100-SXM4-40GB", "a100-40gb", {}),
    ("A100 40G", "a100-40gb", {}),
    ("8 x A100 80GB SXM", "a100-80gb", {}),
    ("A100s (80GB)", "a100-80gb", {}),
    ("2x8 A100-80G", "a100-80gb", {}),
    ("V100-SXM2-32GB", "v100", {}),
    ("Tesla V100 16GB", "v100", {"memory_gib": 16}),
    ("H200 141GB", "h200", {}),
    ("NVIDIA H200 SXM", "h200", {}),
    ("L40S", "l40s", {}),
    ("Intel Gaudi 3 HL-325L", "gaudi3", {}),
    ("Gaudi3", "gaudi3", {}),
]


@pytest.mark.parametrize(("text", "name", "checks"), HARDWARE)
def test_hardware_variants(text: str, name: str, checks: dict) -> None:
    hw = _read(gpu=text).hardware
    assert hw.name == name
    for key, want in checks.items():
        got = hw.peak_tflops[key] if key in ("bf16", "fp8") else getattr(hw, key)
        assert got == pytest.approx(want, rel=1e-3), (text, key)


FRAMEWORKS = [
    ("torchtitan (FSDP2, compile, async TP)", "fsdp2", {"compile": True, "tp_overlap": True}),
    ("NeMo 2.0", "megatron", {}),
    ("Megatron-Core 0.9", "megatron", {}),
    ("NeMo Megatron", "megatron", {}),
    ("Megatron-LM", "megatron", {}),
    ("MCore", "megatron", {}),
    ("NVIDIA NeMo Framework 24.07", "megatron", {}),
    ("Megatron-LM (--overlap-grad-reduce --overlap-param-gather)", "megatron", {}),
    ("JAX/MaxText", "maxtext", {}),
    ("Levanter (JAX)", "maxtext", {}),
    ("Pax", "maxtext", {}),
    ("T5X", "maxtext", {}),
    ("PyTorch DDP", "ddp", {}),
    ("picotron", "ddp", {}),
    ("DeepSpeed ZeRO-3", "deepspeed", {}),
    ("Megatron-DeepSpeed", "deepspeed", {}),
    ("Colossal-AI (ZeRO-2)", "deepspeed", {}),
    ("PyTorch FSDP", "fsdp1", {}),
    ("HF Accelerate (FSDP)", "fsdp1", {}),
    ("MosaicML Composer", "fsdp1", {}),
    ("Lightning FSDP", "fsdp1", {}),
    ("FSDP2", "fsdp2", {}),
    ("TorchTitan", "fsdp2", {}),
    ("torch.compile + FSDP2", "fsdp2", {"compile": True}),
]


@pytest.mark.parametrize(("text", "profile", "checks"), FRAMEWORKS)
def test_framework_variants(text: str, profile: str, checks: dict) -> None:
    lay = _read(framework=text).layout
    assert lay.framework == profile
    for key, want in checks.items():
        assert getattr(lay, key) == want, (text, key)


def test_a_named_framework_without_a_profile_is_assumed_and_says_so() -> None:
    out = predict_row({**BASE, "framework": "nanotron", "zero_or_fsdp": "ZeRO-1", "source": "x"}, CAT, _eff())
    assert out.get("reason") is None
    assert any("'nanotron' has no profile" in a for a in out["assumed"])


PRECISIONS = [
    ("FP8 (delayed scaling, TE 1.x)", "fp8", "delayed"),
    ("bf16 + fp8 all-gather", "fp8", "tensorwise"),
    ("BF16", "bf16", None),
    ("bfloat16 mixed precision", "bf16", None),
    ("AMP fp16", "fp16", None),
    ("O2 fp16 (apex)", "fp16", None),
    ("fp8 hybrid (E4M3/E5M2)", "fp8", "delayed"),
    ("FP8 E4M3", "fp8", "delayed"),
    ("float8 rowwise", "fp8", "rowwise"),
    ("MXFP8", "fp8", "mxfp8"),
    ("NVFP4", "fp4", "nvfp4"),
    ("mixed precision (bf16)", "bf16", None),
    ("BF16 w/ FP32 master weights", "bf16", None),
    ("fp16 (dynamic loss scaling)", "fp16", None),
    ("TE FP8 current scaling", "fp8", "current"),
    ("torchao float8 (tensorwise)", "fp8", "tensorwise"),
    ("FP8 (per-tensor dynamic)", "fp8", "tensorwise"),
    ("fp8 blockwise (128x128 blocks)", "fp8", "mxfp8"),
    ("BF16/FP32", "bf16", None),
    ("half", "fp16", None),
    ("mixed", "bf16", None),
    ("amp", "bf16", None),
]


@pytest.mark.parametrize(("text", "prec", "recipe"), PRECISIONS)
def test_precision_variants(text: str, prec: str, recipe: str | None) -> None:
    # fp4 and the MX formats need Blackwell's tensor cores (precision.check_recipe_on); blockwise FP8 runs on Hopper
    gpu = "B200" if prec == "fp4" or "mx" in text.lower() else "H100 SXM"
    lay = _read(precision=text, gpu=gpu).layout
    assert lay.precision == prec and (recipe is None or lay.fp8_recipe == recipe)


def test_fp8_all_gather_is_the_fsdp_float8_gather() -> None:
    assert _read(precision="bf16 + fp8 all-gather").layout.fp8_gather


RECOMPUTE = [
    ("activation checkpointing: selective", "selective"),
    ("SAC", "selective"),
    ("selective activation checkpointing", "selective"),
    ("op-level SAC", "selective"),
    ("full AC", "full"),
    ("AC every layer", "full"),
    ("no AC", "none"),
    ("activation checkpointing disabled", "none"),
    ("recompute_granularity=selective", "selective"),
    ("--recompute-granularity selective", "selective"),
    ("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1", "full"),
    ("--recompute-activations", "selective"),
    ("--checkpoint-activations", "full"),
    ("gradient checkpointing", "full"),
    ("remat", "full"),
    ("remat_policy=full", "full"),
    ("remat_policy=minimal", "selective"),
    ("nothing_saveable", "full"),
    ("checkpoint_dots", "none"),
    ("AC: none", "none"),
    ("AC=full", "full"),
    ("activation_checkpoint_mode: selective", "selective"),
    ("off", "none"),
    ("False", "none"),
    ("True", "full"),
    ("selective (op)", "selective"),
    ("full recompute", "full"),
    ("Full", "full"),
    ("uniform", "full"),
    ("recompute: core attention", "selective"),
    # recompute named by module, as two held-out reports write it (refused as not understood before)
    ("recomputation of all RMSNorm operations and MLA up-projections during back-propagation", "selective"),
    ("selected_modules: blocks.*.feed_forward (TransformerActivationCheckpointingMode.selected_modules)", "mlp"),
    ("no recomputation", "none"),
    ("full recomputation of every layer including the layernorm", "full"),  # review of 2026-12-06, M4
    ("selected_modules: blocks.*.attention, blocks.*.feed_forward", "full"),
    ("selected_modules: blocks.*.attention", "selective"),
]


@pytest.mark.parametrize(("text", "mode"), RECOMPUTE)
def test_recompute_variants(text: str, mode: str) -> None:
    assert _read(recompute=text).layout.recompute == mode


LAYOUTS = [
    ({"pp": "4", "pp_schedule": "1F1B interleaved"}, ("schedule", "interleaved"), ("vpp", 2)),
    ({"pp": "4", "pp_schedule": "virtual pipeline 2"}, ("schedule", "interleaved"), ("vpp", 2)),
    ({"pp": "4", "pp_schedule": "interleaved 1F1B (vpp 4)"}, ("vpp", 4), ("schedule", "interleaved")),
    ({"pp": "4", "pp_schedule": "VPP=2"}, ("vpp", 2), ("schedule", "interleaved")),
    ({"pp": "4", "pp_schedule": "interleaved, 2 model chunks per rank"}, ("vpp", 2), ("schedule", "interleaved")),
    ({"pp": "4", "pp_schedule": "GPipe"}, ("schedule", "gpipe"), ("vpp", 1)),
    ({"pp": "4", "pp_schedule": "1F1B"}, ("schedule", "1f1b"), ("vpp", 1)),
    ({"tp": "8", "sp": "sequence parallel"}, ("sp", True), ("tp", 8)),
    ({"tp": "8", "sp": "TP=8 SP"}, ("sp", True), ("tp", 8)),
    ({"tp": "8", "sp": "yes"}, ("sp", True), ("tp", 8)),
    ({"cp": "context parallel 2"}, ("cp", 2), ("dp", 32)),
    ({"cp": "CP=2"}, ("cp", 2), ("dp", 32)),
    ({"tp": "TP=2"}, ("tp", 2), ("dp", 32)),
    ({"tp": "2-way"}, ("tp", 2), ("dp", 32)),
    ({"zero_or_fsdp": "HSDP (8 x 8)"}, ("shard_dp", 8), ("zero", 3)),
    ({"zero_or_fsdp": "FSDP HYBRID_SHARD"}, ("shard_dp", 8), ("zero", 3)),
    ({"zero_or_fsdp": "dp_shard=8, dp_replicate=8"}, ("shard_dp", 8), ("zero", 3)),
    ({"zero_or_fsdp": "ici_fsdp_parallelism=16, dcn_data_parallelism=4"}, ("shard_dp", 16), ("zero", 3)),
    ({"zero_or_fsdp": "ZeRO stage 2"}, ("zero", 2), ("shard_dp", 64)),
    ({"zero_or_fsdp": "ZeRO-1 (distributed optimizer)"}, ("zero", 1), ("shard_dp", 64)),
    ({"zero_or_fsdp": "FULL_SHARD"}, ("zero", 3), ("shard_dp", 64)),
    ({"num_gpus": "1,024", "global_batch_seqs": "1,024"}, ("devices", 1024), ("dp", 1024)),
    ({"num_gpus": "64 GPUs"}, ("devices", 64), ("dp", 64)),
    ({"num_gpus": "8 nodes x 8"}, ("devices", 64), ("dp", 64)),
    ({"num_gpus": "8x8"}, ("devices", 64), ("dp", 64)),
]


@pytest.mark.parametrize(("change", "a", "b"), LAYOUTS)
def test_layout_variants(change: dict, a: tuple, b: tuple) -> None:
    lay = _read(**change).layout
    for key, want in (a, b):
        assert getattr(lay, key) == want, (change, key)


@pytest.mark.parametrize(
    ("change", "attr", "want"),
    [
        ({"seq_len": "8k"}, "seq", 8192),
        ({"seq_len": "4K"}, "seq", 4096),
        ({"seq_len": "8192 (8k)"}, "seq", 8192),
        ({"seq_len": "32k context"}, "seq", 32768),
        ({"ffn_act": "gelu_new"}, "act", "gelu"),
        ({"ffn_act": "gelu_pytorch_tanh"}, "act", "gelu"),
        ({"ffn_act": "quick_gelu"}, "act", "gelu"),
        ({"ffn_act": "SwiGLU (SiLU gate)"}, "act", "swiglu"),
        ({"ffn_act": "ReLU²"}, "act", "squared-relu"),
        ({"ffn_act": "GeGLU"}, "act", "geglu"),
        ({"ffn_act": "silu_and_mul"}, "act", "swiglu"),
        ({"ffn_act": "fast-gelu"}, "act", "gelu"),
        ({"ffn_act": "Swish-GLU"}, "act", "swiglu"),
        ({"ffn_act": "GELU (tanh approx)"}, "act", "gelu"),
        ({"ffn_act": "ReGLU"}, "act", "swiglu"),
    ],
)
def test_number_and_activation_variants(change: dict, attr: str, want: object) -> None:
    assert getattr(_read(**change).spec, attr) == want


NO_DIMS = {
    "layers": "",
    "hidden": "",
    "heads": "",
    "kv_heads": "",
    "ffn_hidden": "",
    "vocab": "",
    "arch": "",
    "ffn_act": "",
}


@pytest.mark.parametrize(
    ("model", "hidden", "layers", "experts"),
    [
        ("Llama 3.1 8B", 4096, 32, 0),
        ("Llama-3-70B", 8192, 80, 0),
        ("llama3.1 405b", 16384, 126, 0),
        ("Llama 2 13B", 5120, 40, 0),
        ("Mixtral 8x7B", 4096, 32, 8),
        ("Mixtral-8x22B", 6144, 56, 8),
        ("GPT-3 175B", 12288, 96, 0),
        ("gpt3-1.3b", 2048, 24, 0),
    ],
)
def test_a_named_model_without_dimensions_takes_the_preset(model: str, hidden: int, layers: int, experts: int) -> None:
    inp = _read(model=model, **NO_DIMS)
    assert (inp.spec.hidden, inp.spec.layers, inp.spec.experts) == (hidden, layers, experts)
    assert any("preset" in n for n in inp.notes)


def test_a_batch_dp_does_not_divide_is_rounded_when_that_moves_little() -> None:
    inp = _read(global_batch_seqs="1000")  # dp 64: 960 used, 4% of the batch dropped
    assert inp.global_batch == 960 and any("960 used" in n for n in inp.notes)
    refused = row_inputs({**BASE, "global_batch_seqs": "100"}, CAT)  # 64 of 100: a 36% change
    assert refused.reason is not None and "global_batch_seqs 100 is not divisible by dp 64" in refused.reason


def test_global_batch_in_tokens() -> None:
    assert _read(global_batch_seqs="4M tokens").global_batch == 512  # 4 x 2^20 / 8192
    assert _read(global_batch_seqs="4,194,304 tokens").global_batch == 512
    assert _read(global_batch_seqs="2M tokens", seq_len="2000", num_gpus="8").global_batch == 1000  # decimal divides
    assert _read(global_batch_seqs="512 sequences").global_batch == 512


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"zero_or_fsdp": "ZeRO-Infinity (NVMe)"}, "NVMe offload"),
        ({"zero_or_fsdp": "ZeRO-2 (offload_param cpu)"}, "parameters offloaded without their sharding"),
        ({"gpu": "RTX 5080"}, "RTX 5080"),
        ({"gpu": "Tesla P100"}, "P100"),
        ({"gpu": "Trainium2"}, "TRAINIUM"),
        ({"gpu": "NVIDIA B200 PCIe"}, "B200 PCIe"),  # no B200 PCIe in the catalog: not the HGX part's NVLink
        ({"model": "some 9B model", **NO_DIMS}, "`hidden` is blank"),
        ({"arch": "MoE"}, "number of experts"),
        ({"ffn_act": "tanh"}, "ffn_act 'tanh'"),
        ({"num_gpus": ""}, "`num_gpus` is blank"),
        ({"precision": "int4"}, "precision"),
        ({"recompute": "sometimes"}, "recompute 'sometimes'"),
        ({"num_gpus": "64", "dp": "3"}, "!= num_gpus"),
        # the catalog's TPU v6e lists a bf16 peak only: an fp8 row is refused when read, not mid-way through a fit
        ({"gpu": "TPU v6e", "num_gpus": "256", "gpus_per_node": "4", "precision": "fp8",
          "framework": "MaxText", "zero_or_fsdp": "FSDP"}, "has no fp8 peak"),
    ],
)
def test_refusals_name_the_input(change: dict, names: str) -> None:
    inp = row_inputs({**BASE, **change}, CAT)
    assert inp.reason is not None and names in inp.reason, inp.reason


def _eff():
    from stride.perfmodel.efficiency import Efficiency

    return Efficiency()


def test_assumptions_are_recorded_in_the_json() -> None:
    row = {
        **BASE,
        "micro_batch": "",
        "heads": "",
        "precision": "",
        "framework": "",
        "recompute": "",
        "gpu": "H100",
        "zero_or_fsdp": "",
    }
    out = predict_row(row, CAT, _eff())
    assert out.get("reason") is None
    text = " | ".join(out["assumed"])
    for word in ("micro_batch", "heads", "precision", "framework", "recompute", "SXM"):
        assert word in text, word
    stated = predict_row({**BASE, "gpu": "H100-SXM5 @500W"}, CAT, _eff())
    assert any("power cap" in n for n in stated["notes"]) and not any("power cap" in a for a in stated["assumed"])
