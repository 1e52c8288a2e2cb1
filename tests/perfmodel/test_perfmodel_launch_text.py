"""Rows written the way launch configs and system descriptions write them (MLPerf submissions, NeMo and
Megatron-LM configs, HF/fms model configs): each reads right, or the row is refused naming the input.
Written from those projects' documented option names and the MLPerf system-description fields, not from
any result table."""

from __future__ import annotations

import pytest
from test_perfmodel_row_variants import BASE  # the same base row; pytest puts this folder on sys.path

from stride.perfmodel import row_text as rt
from stride.perfmodel.frameworks import framework_from_text
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.hw_text import link_gbytes_per_device, resolve
from stride.perfmodel.published import row_inputs

CAT = load_catalog()


def _read(**change: str):
    inp = row_inputs({**BASE, **change}, CAT)
    assert inp.reason is None, inp.reason
    return inp


@pytest.mark.parametrize("text, mode, layers", [
    ("activations_checkpoint_granularity: null", "none", 0),
    ("ACT_CKPT_GRANULARITY=null", "none", 0),
    ("activations_checkpoint_granularity: null (ACT_CKPT_GRANULARITY default)", "none", 0),
    ("activations_checkpoint_granularity not set (NeMo default: null)", "none", 0),
    ("recompute_granularity: None", "none", 0),
    ("--use-fused-sdpa-with-recompute true", "none", 0),
    ("ACG=full ACM=block ACL=21", "full", 21),
    ("--recompute-granularity full --recompute-method block --recompute-num-layers 4", "full", 4),
    ("activations_checkpoint_granularity: full, activations_checkpoint_method: uniform", "full", 0),
    ("fsdp_activation_checkpointing: True (selective_checkpointing 1: every block)", "full", 0),
    ("fsdp_activation_checkpointing: False", "none", 0),
])
def test_recompute_as_configs_write_it(text: str, mode: str, layers: int) -> None:
    inp = _read(recompute=text)
    assert (inp.layout.recompute, inp.layout.recompute_layers) == (mode, layers)


@pytest.mark.parametrize("text", ["norm, act", "--recompute-modules layernorm moe_act", "layernorm"])
def test_recomputing_only_norms_and_activations_is_costed_as_none_and_noted(text: str) -> None:
    inp = _read(recompute=text)
    assert inp.layout.recompute == "none"
    assert any("elementwise" in n and "assumed" in n for n in inp.notes)


def test_megatron_moe_arguments() -> None:
    inp = _read(model="Qwen3-235B-A22B", layers="94", hidden="4096", heads="64", kv_heads="4", ffn_hidden="12288",
                ffn_act="--swiglu", tp="2", num_gpus="256", pp="8", vpp="4", pp_schedule="VPP 4",
                zero_or_fsdp="--use-distributed-optimizer", framework="Megatron-Core",
                arch="--num-experts 128 --moe-router-topk 8 --moe-ffn-hidden-size 1536 --kv-channels 128, "
                     "expert parallel 32", global_batch_seqs="2048")
    s = inp.spec
    assert (s.experts, s.top_k, s.moe_ffn, s.head_dim, s.q_dim, inp.layout.ep) == (128, 8, 1536, 128, 8192, 32)
    assert inp.layout.stage_split == "embedding-loss"  # 94 blocks + embedding + loss over pp*vpp = 32


def test_expert_model_parallel_size_and_moe_without_experts_refused() -> None:
    assert _read(arch="8 experts, top-2, --expert-model-parallel-size 8").layout.ep == 8
    refused = row_inputs({**BASE, "arch": "MoE, --moe-router-topk 2"}, CAT)
    assert refused.reason and "experts" in refused.reason


def test_more_pipeline_chunks_than_blocks_when_embedding_and_loss_are_stages() -> None:
    # Megatron --account-for-embedding/loss-in-pipeline-split: 94 blocks + 2 over pp*vpp = 96 chunks of one
    inp = _read(layers="94", hidden="4096", heads="64", kv_heads="4", ffn_hidden="12288", num_gpus="256", tp="2",
                pp="32", vpp="3", pp_schedule="VPP 3", global_batch_seqs="2048")
    assert inp.layout.stage_split == "embedding-loss"
    from stride.perfmodel.efficiency import Efficiency
    from stride.perfmodel.predict_rows import predict_inputs
    assert predict_inputs(inp, Efficiency()).step_time_s > 0


@pytest.mark.parametrize("act, arch, want", [
    ("silu (LLaMAConfig activation_fn)", "LLaMA (fms): RMSNorm, rotary", "swiglu"),
    ("silu", "Qwen2 decoder", "swiglu"),
    ("silu", "GPT-NeoX style", "silu"),
    ("--swiglu", "", "swiglu"),
    ("Swiglu", "", "swiglu"),
])
def test_activation_as_model_configs_name_it(act: str, arch: str, want: str) -> None:
    assert rt.activation(act, arch)[0] == want


@pytest.mark.parametrize("text, stage", [("ZERO_STAGE=0 (run_gpt.sh default)", 0), ("zero_stage: 3", 3),
                                         ("USE_DIST_OPTIMIZER=True", 1), ("FSDP On", 3),
                                         ("sharding_strategy: hsdp (sharding_group_size 8)", 3)])
def test_zero_stage_as_written(text: str, stage: int) -> None:
    assert rt.zero_stage(text)[0] == stage


@pytest.mark.parametrize("text, name", [
    ("Intel(R) Gaudi(R) 2 AI Accelerator", "gaudi2"),
    ("Habana Gaudi2", "gaudi2"),
    ("AMD Instinct MI350X (288 GB)", "mi350x"),
    ("AMD Instinct MI355X (288 GB)", "mi355x"),
    ("NVIDIA Blackwell GPU (GB200), Tyche (8x NVIDIA GB200 NVL72)", "gb200"),
    ("NVIDIA Blackwell Ultra GPU (B300-SXM-270GB), Nebius B300 n1 (8x B300-SXM-270GB)", "b300"),
    ("NVIDIA Blackwell GPU (B200-SXM-180GB), 1xXE9680Lx8B200-SXM-180GB", "b200"),
    ("NVIDIA H200-SXM5-141GB, nebius_soperator_8xH200_n128", "h200"),
])
def test_mlperf_accelerator_names(text: str, name: str) -> None:
    hw, _ = resolve(text, CAT)
    assert hw.name == name
    if name == "gb200":
        assert hw.scaleup_domain == 72


@pytest.mark.parametrize("text, per_node, up, want", [
    # a node's NICs, the compute network of a multi-network description, bits and bytes
    ("Storage+Management: 1x NVIDIA BlueField 2 DPU 100Gb/s, Compute: 8x NVIDIA ConnectX-7 IB NDR 400Gb/s",
     8, False, 50),
    ("Storage: 2x ConnectX-7 IB NDR 400Gb/s, Compute: 8x ConnectX-7 IB NDR 400Gb/s, Management: 100Gb/s Ethernet NIC",
     8, False, 50),
    ("Management: 1x Bluefield-2 DPU Ethernet 100Gb/Sec, Compute: 8x ConnectX-7 InfiniBand NDR 400Gb/Sec",
     8, False, 50),
    ("1x Ethernet 100Gb/Sec, 8x NVIDIA Quantum-2 CX7 InfiniBand (400Gb/s)", 8, False, 50),
    ("4x ConnectX-7 IB NDR 400Gb/s", 4, False, 50),
    ("4x ConnectX-8 IB XDR 800 Gb/s", 4, False, 100),
    ("InfiniBand 8x50 GB/s", 8, False, 50),
    ("8x ConnectX-7 IB NDR 400Gb/s + 200Gb/s Ethernet NIC", 8, False, 50),
    ("8x NDR 400Gb/s per GPU", 8, False, 50),  # a node's 8 NICs, one a GPU (no GPU drives 3.2 Tb/s; it read 400)
    # unchanged readings of round 2
    ("8x HDR InfiniBand 200 Gb/s per node (Selene)", 8, False, 25),
    ("RoCE 1600 Gbps per node (8 x 200 Gbps)", 8, False, 25),
    # scale-up: vendors quote NVLink per GPU as a bidirectional total; aggregates are per node
    ("NVLINK Gen4 900 GB/s + NVSWITCH Gen3", 8, True, 450),
    ("NVLINK Gen5 1800 GB/s + NVSWITCH Gen5", 4, True, 900),
    ("18x 5th Gen NVLink, 14.4 TB/s aggregated bandwidth", 8, True, 900),
    ("8x 4th Gen NVLink, 900GB/s", 8, True, 450),
    ("NVLink3/NVSwitch 600 GB/s bidir per GPU", 8, True, 300),
    ("NVLink 450 GB/s per direction", 8, True, 450),
])
def test_link_text_as_system_descriptions_write_it(text: str, per_node: int, up: bool, want: float) -> None:
    assert link_gbytes_per_device(text, per_node, scale_up=up) == pytest.approx(want)


@pytest.mark.parametrize("text, want", [
    ("PyTorch NVIDIA Release 23.09; MCORE_CUDA_GRAPH=1", "megatron"),
    ("PyTorch NVIDIA Release 23.09; TP_COMM_OVERLAP=True", "megatron"),
    ("NVIDIA NeMo Framework Release 25.04; TP_COMM_OVERLAP=True FULL_CUDA_GRAPH=True", "megatron"),
    ("PyTorch FSDP (fms-fsdp), SDPA implementation of Flash attention v2", "fsdp1"),
    ("PyTorch 2.8.0", "ddp"),
])
def test_framework_from_launch_variables(text: str, want: str) -> None:
    assert framework_from_text(text) == want


def test_fp8_parameter_gather_as_megatron_and_nemo_write_it() -> None:
    on = _read(precision="FP8=True (fp8_recipe: delayed), FP8_PARAM_GATHER=True", framework="NeMo")
    off = _read(precision="FP8=True, FP8_PARAM_GATHER=False", framework="NeMo")
    bf16 = _read(precision="bf16", framework="NeMo", notes="FP8_PARAMS=True in a config this run did not use")
    assert (on.layout.fp8_gather, off.layout.fp8_gather, bf16.layout.fp8_gather) == (True, False, False)


@pytest.mark.parametrize("arch, frozen", [("peft_scheme: lora, adapter_dim: 16, target_modules: ['attention']", True),
                                          ("LoRA rank 16 on q,v", True), ("Llama 3 (RMSNorm, rotary)", False)])
def test_lora_rows_freeze_the_base_weights(arch: str, frozen: bool) -> None:
    assert _read(arch=arch).layout.frozen is frozen
