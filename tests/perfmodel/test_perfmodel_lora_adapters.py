"""LoRA adapters' own kernels (NeMo's unfused LoRALinear / ParallelLinearAdapter), against a hand computation."""

from __future__ import annotations

import pytest

from stride.perfmodel import row_text as rt
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import PRESETS

HW = load_catalog().get("h100-sxm")
SPEC = PRESETS["llama2-70b"].with_seq(4096)  # h 8192, 64 heads, 8 KV heads of 128: qkv 8192 -> 10240
EFF = Efficiency()


def _pred(recompute: str = "none", **kw):
    lay = Layout(dp=8, micro_batch=1, recompute=recompute, framework="megatron", frozen=True, **kw)
    return predict(SPEC, lay, HW, 8, EFF)


def _gemm_s(m: int, n: int, k: int) -> float:
    """A 16-bit GEMM as the model costs one: FLOPs at the bf16 MAMF x gemm, plus its bytes at HBM x memory."""
    rate = HW.peak_flops("bf16") * HW.matmul_fraction("bf16") * EFF.gemm
    return 2 * m * n * k / rate + 2 * (m * k + k * n + m * n) / (HW.memory_bw * EFF.memory)


def test_adapter_kernels_by_hand() -> None:
    m, r, bw, L = 4096, 16, HW.memory_bw * EFF.memory, SPEC.layers
    # qkv: a = 8192 in, b = 10240 out; attention output projection: a = b = 8192; 2-byte activations
    pairs = [(8192, 10240), (8192, 8192)]
    gemms = sum(_gemm_s(m, r, a) + _gemm_s(m, b, r) for a, b in pairs)
    # forward: dropout 2a + 2a + 1a (mask), scale 2b + 2b, add 4b + 2b; backward: dropout 5a, scale 4b, the
    # adapter's input gradient added to the base's 4a + 2a
    ew_f = sum(5 * a + 10 * b for a, b in pairs) * m / bw
    ew_b = sum(5 * a + 4 * b + 6 * a for a, b in pairs) * m / bw
    want = L * (3 * gemms + ew_f + ew_b)
    got = _pred(lora_rank=r, lora_dropout=0.1).breakdown_s["lora"]
    assert got == pytest.approx(want, rel=1e-9)
    # no dropout: the two 5a passes go
    assert _pred(lora_rank=r).breakdown_s["lora"] == pytest.approx(want - L * 2 * 5 * 16384 * m / bw, rel=1e-9)
    # full recompute re-runs the block forward, adapters included
    full = _pred("full", lora_rank=r, lora_dropout=0.1).breakdown_s["lora"]
    assert full == pytest.approx(want + L * (gemms + ew_f), rel=1e-9)
    # a frozen base without a rank costs no adapter (the planner's bare --frozen), and the step pays for them
    assert _pred().breakdown_s["lora"] == 0.0
    assert _pred(lora_rank=r).step_time_s > _pred().step_time_s


def test_adapter_targets_and_rank_from_text() -> None:
    text = ("peft_scheme: lora, adapter_dim: 16, target_modules: ['attention'], lora_dropout: 0.1, "
            "dropout_position: pre (train.py)")
    assert rt.lora(text)[:3] == (16, "attention", 0.1)
    assert rt.lora("LoRA r=8 target_modules: ['q_proj', 'v_proj', 'gate_proj', 'down_proj']")[:3] == (8, "all", 0.0)
    assert rt.lora("lora_rank 64, target_modules linear_fc1, linear_fc2")[:3] == (64, "mlp", 0.0)
    rank, targets, _, notes = rt.lora("LoRA fine-tuning")
    assert (rank, targets) == (rt.DEFAULT_LORA_RANK, "attention") and len(notes) == 2


def test_mlp_adapters_cost_more_than_attention_ones() -> None:
    attn = _pred(lora_rank=16, lora_targets="attention").breakdown_s["lora"]
    both = _pred(lora_rank=16, lora_targets="all").breakdown_s["lora"]
    mlp = _pred(lora_rank=16, lora_targets="mlp").breakdown_s["lora"]
    assert both == pytest.approx(attn + mlp, rel=1e-9) and mlp > attn
