"""What the round-17 blind test found (docs/perfmodel.md, "Round 17"): a metric that says how it counts causal
attention is read that way, before any date of the code."""

from __future__ import annotations

import pytest

from stride.perfmodel.measured import flops_per_token, measured_tokens_per_s, megatron_halves_attention
from stride.perfmodel.model_spec import TransformerSpec

# the USP paper's metric (arXiv:2405.07719, Tables 5-7): Megatron's count of April 2024, changed by the authors
USP = ("Megatron num_floating_point_operations (model FLOPs, no recompute) with attention causal-halved (the authors "
       "adjusted Megatron-LM's MFU computation to count only effective computation under causal masking)")
USP_CODE = "Megatron-LM commit 2196398 (2024-04-12) + USP; nvcr.io/nvidia/nemo:24.03 container"


@pytest.mark.parametrize(("metric", "context", "halved"), [
    (USP, USP_CODE, True),  # said halved: the 2024 date does not undo it
    ("Megatron num_floating_point_operations (attention not causal-halved)", "Megatron-Core core_r0.13.0", False),
    ("Megatron --log-throughput, causal attention not halved", "NeMo container nemo:25.07", False),
    ("Megatron --log-throughput (full attention square)", "Megatron-LM dev branch (2025-06-01)", False),
    ("Megatron --log-throughput, counting half the attention matrix", "Megatron-LM core_r0.8.0", True),
    # says nothing: the code's date decides, as before
    ("Megatron-LM --log-throughput (num_floating_point_operations)", USP_CODE, False),
    ("Megatron-LM --log-throughput (num_floating_point_operations)", "Megatron-Core core_r0.12.0", True),
    # another framework's count is not Megatron's, whatever it says
    ("xtuner ThroughputHook (causal attention halved)", "", False),
])
def test_what_a_metric_says_of_its_causal_count_decides_before_the_date(metric: str, context: str,
                                                                         halved: bool) -> None:
    assert megatron_halves_attention(metric, context) is halved


def test_usp_llama3_8b_at_64k_reads_with_the_halved_count() -> None:
    """Llama 3 8B at 64K tokens: the attention square is most of the full count, so halving it takes the FLOPs a
    token from 148 to 97 G, and the 87.67 TFLOP/s of USP's Table 6 reads as 1.53x the tokens/s it read before."""
    spec = TransformerSpec(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, act="swiglu", vocab=128256,
                           seq=65536)
    half, conv = flops_per_token(USP, spec, USP_CODE)
    full, _ = flops_per_token("", spec)
    assert conv.startswith("megatron (causal half")
    assert (full / 1e9, half / 1e9) == pytest.approx((148.1, 96.6), abs=0.1)
    row = {"meas_tflops_per_gpu": "87.67", "tflops_metric": USP, "framework": USP_CODE}
    value, how = measured_tokens_per_s(row, spec, 1, 16, None)
    assert value == pytest.approx(87.67e12 / half, rel=1e-9)
    assert "causal half" in how
