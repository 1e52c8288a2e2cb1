"""What the round-16 blind test found (docs/perfmodel.md, "Blind test (round 16)"): Megatron's fp16 gradient copy exists
only during the optimizer step, and Megatron's logged TFLOP/s halves causal attention since 2025-03."""

from __future__ import annotations

import pytest

from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.layout import Layout
from stride.perfmodel.measured import flops_per_token, measured_tokens_per_s, megatron_halves_attention
from stride.perfmodel.memory_model import _states, predict_memory
from stride.perfmodel.model_spec import TransformerSpec

GIB = 2**30


def _gpt(vocab: int) -> TransformerSpec:
    # the Vocabulary Parallelism paper's 4B model (h 3072, 32 layers, 4h MLP, learned positions, GeLU)
    return TransformerSpec(layers=32, hidden=3072, heads=24, kv_heads=24, ffn=4 * 3072, act="gelu", vocab=vocab,
                           seq=2048, bias=True, learned_pos=True)


@pytest.mark.parametrize(("precision", "gbytes", "train", "step"), [
    ("fp16", 2, 16.0, 20.0),  # fp32 copy of the fp16 gradients made at the step, dropped by zero_grad
    ("fp16", 4, 18.0, 18.0),  # fp32 gradient buffer: .float() is the buffer itself, no copy
    ("bf16", 4, 18.0, 18.0),  # bf16 accumulates in fp32 (Megatron forces it)
    ("bf16", 2, 16.0, 20.0),  # a 16-bit gradient reduction (DeepSpeed's bf16 without fp32 reduce): the same copy
])
def test_megatron_state_bytes_per_parameter_at_the_activation_peak_and_at_the_step(
        precision: str, gbytes: int, train: float, step: float) -> None:
    lay = Layout(framework="megatron", precision=precision, pp=8)
    assert sum(_states(lay, 1.0, gbytes).values()) == train
    assert sum(_states(lay, 1.0, gbytes, at_step=True).values()) == step


def test_fp16_memory_grows_16_bytes_a_parameter_with_the_vocabulary_as_measured() -> None:
    """Table 5 of the Vocabulary Parallelism paper (8 A100, seq 2k, 1F1B, fp16, max reserved): 14.86 GiB at a 32k
    vocabulary, 25.64 at 256k, so 16.8 bytes per added embedding parameter on device 0 (the allocator's slack
    included). With the step's copy at the activation peak the model grew 20 bytes a parameter."""
    hw = load_catalog().get("a100-80gb")
    lay = Layout(framework="megatron", precision="fp16", pp=8, schedule="1f1b", attention="flash")

    def reserved(vocab: int) -> float:
        spec = _gpt(vocab)
        p_block = 12 * 3072**2
        devices = [(4, 4 * p_block + (vocab * 3072 if d in (0, 7) else 0), 8 - d, d == 7) for d in range(8)]
        return predict_memory(spec, lay, hw, devices, gbytes=2, fused=True).reserved

    per_param = (reserved(256_000) - reserved(32_000)) / ((256_000 - 32_000) * 3072)
    measured = (25.64 - 14.86) * GIB / ((256_000 - 32_000) * 3072)
    assert per_param == pytest.approx(measured, rel=0.08)


@pytest.mark.parametrize(("metric", "context", "halved"), [
    ("Median TFLOP/s/GPU (README); Megatron-LM --log-throughput model TFLOP/s per GPU",
     "Megatron-LM (Megatron-Core, dev branch), NGC pytorch:26.03-py3", True),
    ("last_10_steps_model_tflops_per_gpu_avg (Megatron-Bridge logged model TFLOP/s per GPU)", "", True),
    ("Megatron-LM --log-throughput (num_floating_point_operations)", "Megatron-Core core_r0.12.0", True),
    # before the change (2025-03), or a version the row does not give: the full square, as the fallback
    ("Megatron-LM --log-throughput (num_floating_point_operations)", "NGC pytorch:24.09-py3", False),
    ("Megatron-LM --log-throughput (num_floating_point_operations)", "Megatron-Core core_r0.9.0", False),
    ("Megatron-LM --log-throughput (num_floating_point_operations)", "", False),
    # another framework's count, whatever its date
    ("NeMo TFLOPS / GPU (model FLOPs)", "NeMo 25.04 container", False),
    # the review's cases: release tags and pip pins; an explicit version decides over a container
    ("Megatron-LM --log-throughput", "Megatron-LM core_v0.12.0", True),
    ("Megatron-LM --log-throughput", "pip megatron-core==0.13.0", True),
    ("Megatron-LM --log-throughput", "Megatron-LM core_r0.11.0 in nvcr.io/nvidia/pytorch:25.04-py3", False),
    # a PyTorch container ships no Megatron: it dates only a dev/main branch run; a NeMo container ships it
    ("Megatron-LM --log-throughput", "Megatron-LM, NGC pytorch:25.06-py3", False),
    ("Megatron-LM --log-throughput", "Megatron-LM dev branch, NGC pytorch:25.06-py3", True),
    ("Megatron-LM --log-throughput", "NeMo container nemo:25.04", True),
    # a dev branch dated after the change (round 11's DeepSeek-V3 GB200 guide, commit eb0783b6d3 of 2025-11-03)
    ("Megatron-LM --log-throughput (num_floating_point_operations)",
     "Megatron-Core + Transformer Engine (2025 dev) github NVIDIA/Megatron-LM commit eb0783b6d3 (dev branch, "
     "2025-11-03)", True),
    ("Megatron-LM --log-throughput", "Megatron-LM dev branch (2024-11-20)", False),
])
def test_megatron_logged_tflops_halve_attention_from_2025_04(metric: str, context: str, halved: bool) -> None:
    assert megatron_halves_attention(metric, context) is halved


def test_qwen3_30b_a3b_flops_per_token_match_the_bridge_cards_own_ratio() -> None:
    """Megatron-Bridge's verification card for Qwen3-30B-A3B on 16 H100 logs 299.352 model TFLOP/s at 13011.378
    tokens/s per GPU: 23.007 GFLOP a token. The halved count gives it; the full square gave 27.9."""
    spec = TransformerSpec(layers=48, hidden=2048, heads=32, kv_heads=4, head_dim_override=128, ffn=6144, act="swiglu",
                           vocab=151936, seq=4096, experts=128, top_k=8, moe_ffn=768)
    fpt, conv = flops_per_token("Megatron-Bridge logged model TFLOP/s per GPU", spec)
    assert conv.startswith("megatron (causal half")
    assert fpt == pytest.approx(299.352e12 / 13011.378, rel=0.01)
    full, _ = flops_per_token("", spec)
    assert full / fpt == pytest.approx(27.9 / 23.0, rel=0.02)
    row = {"meas_tflops_per_gpu": "299.352", "tflops_metric": "Megatron-LM --log-throughput model TFLOP/s",
           "framework": "Megatron-LM dev, NGC pytorch:26.03-py3"}
    value, how = measured_tokens_per_s(row, spec, 1024, 16, None)
    assert value == pytest.approx(13011.378, rel=0.01) and "causal half" in how


def test_deepspeed_fp16_keeps_the_gradient_copy_counted_throughout() -> None:
    """DeepSpeed's ZeRO optimizers are not Megatron's: fp16 keeps 20 bytes a parameter (its one development row,
    Megatron-DeepSpeed GPT 1.3B fp16 on 16 V100, -6% so, -18% with Megatron's step-only copy)."""
    lay = Layout(framework="deepspeed", precision="fp16")
    assert sum(_states(lay, 1.0, 2).values()) == sum(_states(lay, 1.0, 2, at_step=True).values()) == 20.0
