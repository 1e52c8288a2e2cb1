"""Every strategy trains the tiny transformer like one process with the same global batch.

The strategies run under torchrun (gloo, one thread per rank): one launch of 2 processes for DDP
(with hooks), FSDP2, TP (with and without sequence parallel, and on the GPT-style token model) and
accumulation, one of 4 for FSDP x TP (2 x 2), HSDP (2 x 2) and DDP over 4. The reference is this
process, alone, on the same config. TP runs also report how attention is split (each rank's share
of its weights, their placements) and the collectives of one step. fp32 paths must agree to
float32 rounding; compression hooks and bf16 params are recorded with looser bounds, since
changing the loss is what they trade for bandwidth.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from parallel_worker import BY_WORLD, REFERENCE, run

from stride.kernels.runtime import triton_available

FP32 = ["ddp", "ddp_accum", "fsdp", "fsdp_accum", "tp", "tp_nosp", "fsdp_ac", "tp_ac", "tp_token_lm", "tp_triton",
        "fsdp_tp", "hsdp", "ddp4"]
# tensor-parallel runs: (tp degree, data-parallel shards); each rank holds 1/(tp x dp_shard) of each attention weight
TP = {"tp": (2, 1), "tp_nosp": (2, 1), "tp_ac": (2, 1), "tp_token_lm": (2, 1), "tp_triton": (2, 1), "fsdp_tp": (2, 2)}
# (loss bound, parameter bound) for paths that round on purpose
# (seen here: fp16 1.5e-4 / 3.0e-3, bf16 3.5e-4 / 4.2e-3, FSDP bf16 params 1.2e-3 / 1.1e-2, PowerSGD 9.8e-3 / 7.2e-3)
LOOSE = {"ddp_fp16": (1e-3, 1e-2), "ddp_bf16": (3e-3, 2e-2), "fsdp_zero2_bf16": (5e-3, 4e-2),
         "ddp_powersgd": (5e-2, 5e-2)}


# trained under torchrun by parallel_worker.py, in the launches this package's modules share (conftest.py)
TORCHRUN_PART, TORCHRUN_RUNS = "correctness", BY_WORLD


@pytest.fixture(scope="module")
def runs(torchrun_runs) -> Path:
    return torchrun_runs.folder(TORCHRUN_PART)


@pytest.fixture(scope="module")
def references() -> dict[str, tuple[list[float], dict[str, torch.Tensor]]]:
    """One single-process run per distinct reference config (BASE, and the token model)."""
    torch_threads = torch.get_num_threads()
    out = {}
    try:
        for key, overrides in {"base": [], **REFERENCE}.items():
            result, params = run(overrides)
            assert result["world_size"] == 1 and result["parallel"] == "single"
            out[key] = (result["losses"], params)
    finally:
        torch.set_num_threads(torch_threads)
    return out


@pytest.fixture(scope="module")
def reference(references):
    return references["base"]


def _diffs(runs: Path, name: str, reference) -> tuple[dict, float, float]:
    result = json.loads((runs / f"{name}.json").read_text())
    params = torch.load(runs / f"{name}.pt")
    ref_losses, ref_params = reference
    assert len(result["losses"]) == len(ref_losses) == 6
    loss_diff = max(abs(a - b) for a, b in zip(result["losses"], ref_losses, strict=True))
    assert set(params) == set(ref_params), f"{name}: state-dict keys differ from one process"
    param_diff = max(float((params[k].float() - ref_params[k].float()).abs().max()) for k in ref_params)
    print(f"{name}: largest |loss diff| {loss_diff:.3g}, largest |param diff| {param_diff:.3g}")
    return result, loss_diff, param_diff


@pytest.mark.dist
@pytest.mark.slow
@pytest.mark.parametrize("name", FP32)
def test_fp32_strategy_matches_one_process(runs, references, name, record_property):
    result, loss_diff, param_diff = _diffs(runs, name, references[name if name in REFERENCE else "base"])
    record_property("largest_loss_diff", loss_diff)
    record_property("largest_param_diff", param_diff)
    assert result["world_size"] == (4 if name in BY_WORLD[4] else 2)
    # float32 rounding (different reduction orders), amplified a little by six AdamW steps
    assert loss_diff < 2e-6, f"{name}: loss trajectory differs by {loss_diff}"
    # the full (gathered) state dict equals the single-process parameters (AdamW divides rounding
    # noise by sqrt(v) of tiny gradients, so parameters carry more of it than the loss)
    assert param_diff < 2e-5, f"{name}: parameters differ by {param_diff}"


@pytest.mark.dist
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LOOSE))
def test_lossy_communication_stays_close(runs, reference, name, record_property):
    _, loss_diff, param_diff = _diffs(runs, name, reference)
    record_property("largest_loss_diff", loss_diff)
    loss_bound, param_bound = LOOSE[name]
    assert loss_diff < loss_bound and param_diff < param_bound
    assert param_diff > 0, f"{name}: bit-identical to fp32 all-reduce: the compression did not run"


@pytest.mark.dist
@pytest.mark.slow
def test_summary_reports_world_throughput_and_exposed_comm(runs):
    ddp = json.loads((runs / "ddp.json").read_text())
    assert ddp["parallel"] == "ddp"
    assert ddp["per_rank_samples_per_s"] == pytest.approx(ddp["samples_per_s"] / 2)
    assert ddp["comm_exposed_s"] > 0 and ddp["comm_hidden_s"] >= 0
    assert 0 < ddp["exposed_comm_fraction"] < 1
    fsdp = json.loads((runs / "fsdp.json").read_text())
    assert fsdp["comm_exposed_s"] is None  # measured for DDP buckets only
    # every strategy hashes the same full parameters the same way: equal hashes for equal params
    ref = json.loads((runs / "ddp4.json").read_text())
    assert len(ref["params_sha256"]) == 64


@pytest.mark.dist
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TP))
def test_tp_splits_attention_by_heads(runs, name):
    """Attention is not replicated under TP: wq, wk, wv split by output rows (heads), wo by input columns."""
    result = json.loads((runs / f"{name}.json").read_text())
    tp, dp_shard = TP[name]
    assert result["attn_weight_share"] == [1 / (tp * dp_shard)] * (tp * dp_shard)
    placements = result["attn_tp_placements"]
    assert len(placements) == 2 * 4  # two blocks, wq wk wv wo
    for key, placement in placements.items():
        assert placement == ("S(1)" if key.endswith("wo.weight") else "S(0)"), (key, placement)


@pytest.mark.dist
@pytest.mark.slow
def test_tp_communication_per_block(runs):
    """One forward+backward of the 2-block model. Without SP: an all-reduce per sub-layer each way (4 per
    block); with SP the same as an all-gather in and a reduce-scatter out (4 + 4 per block), plus the
    final norm's gather and its gradient's at the embedding. The three (two) column-wise projections
    of a sub-layer share one input gradient reduction, not one each."""
    assert json.loads((runs / "tp_nosp.json").read_text())["tp_comm_counts"] == {"all_reduce": 8}
    assert json.loads((runs / "tp.json").read_text())["tp_comm_counts"] == \
        {"all_gather_into_tensor": 4 * 2 + 2, "reduce_scatter_tensor": 4 * 2}


@pytest.mark.dist
@pytest.mark.slow
@pytest.mark.skipif(not triton_available(), reason="needs Triton with a GPU or TRITON_INTERPRET=1 (tests/conftest.py)")
def test_tp_ran_the_fused_kernels(runs):
    """tp_triton matched one process above; here: the Triton kernels really ran (SP norms on local shards)."""
    assert json.loads((runs / "tp_triton.json").read_text())["kernels"] == "triton"
