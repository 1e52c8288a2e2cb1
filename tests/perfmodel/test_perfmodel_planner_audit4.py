"""Audit 4 of the planner: a default global batch that left a replica a prime number of sequences, and layouts a
framework cannot run (TP / PP recommended to PyTorch DDP and torchtune)."""

from __future__ import annotations

import pytest

from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.model_spec import parse_model_spec
from stride.perfmodel.planner import (
    PARALLELISM,
    candidate_layouts,
    compare_hardware,
    default_global_batch,
    micro_batches,
    search,
    smooth,
)

SMALL = "layers=12,hidden=1024,heads=16,vocab=32000,seq=1024"


def _hw():
    return load_catalog().get("h100-sxm")


@pytest.mark.parametrize("x, want", [(0.3, 1), (1, 1), (2.9, 3), (61.0, 64), (976.56, 1024), (325.5, 384)])
def test_smooth_is_a_power_of_two_or_three_times_one(x: float, want: int) -> None:
    assert smooth(x) == want


@pytest.mark.parametrize("model", [SMALL, "layers=4,hidden=256,heads=8,vocab=1000,seq=512", "llama3-8b",
                                   "llama3-70b", "layers=4,hidden=256,heads=4,vocab=32000,seq=2048"])
@pytest.mark.parametrize("devices", [1, 3, 4, 5, 7, 12, 15, 16, 18, 24, 100, 1000])
def test_every_replica_of_the_default_batch_has_small_divisors(model: str, devices: int) -> None:
    """4 devices at seq 1024 took 3908 = 4 x 977 (prime): micro-batch 1 or 977 only. Now each dp the search tries
    (the divisors of the device count) leaves a replica a multiple of the per-device share, a power of two or three
    times one: a count with a divisor from 2 to 16 (unless it is one sequence) and several micro-batch sizes. (At one
    sequence a device, 1000 devices, a replica takes tp x pp sequences: 25 at pp 25 is what the devices allow.)"""
    spec = parse_model_spec(model)
    gb = default_global_batch(spec, devices)
    share, rem = divmod(gb, devices)
    assert rem == 0 and share == smooth(share)
    assert 0.75 * 4e6 <= gb * spec.seq <= 1.25 * 4e6 or share == 1  # about 4M tokens (or one a device)
    dps = {lay.dp for lay in candidate_layouts(spec, _hw(), devices, gb)} | {devices}
    for dp in dps:
        per_dp, rem = divmod(gb, dp)
        assert rem == 0 and per_dp % share == 0
        if share > 1:
            assert any(per_dp % d == 0 for d in range(2, 17)), (devices, dp, per_dp)
        if share >= 16:
            assert len(micro_batches(per_dp)) >= 5


def test_the_audit_case_takes_a_real_micro_batch_and_four_devices_cost_no_more_than_eight() -> None:
    spec, hw = parse_model_spec(SMALL), _hw()
    gb = default_global_batch(spec, 4)
    assert gb == 4096  # was 3908 = 4 x 977
    best = search(spec, hw, 4, gb).best
    assert best is not None and best.layout.micro_batch > 1  # was mb1, 4.57 s against 3.91 s at gb 3904
    old = search(spec, hw, 4, 3908).best
    assert best.tokens_per_s_per_device > 1.1 * old.tokens_per_s_per_device
    rows = compare_hardware(spec, [(hw, 4), (hw, 8), (hw, 12)], None, token_budget=1e10, sort="cost")
    cost = {r["devices"]: r["cost_to_budget_usd"] for r in rows}
    assert cost[4] <= cost[8] * 1.001 and cost[8] <= cost[12] * 1.001  # 4 H100s were $38 against 8 at $33


def test_an_explicit_batch_with_a_prime_replica_says_so() -> None:
    spec, hw = parse_model_spec(SMALL), _hw()
    notes = search(spec, hw, 4, 3908).notes
    assert any("977 sequences" in n and "1, 977" in n and "4096" in n for n in notes), notes
    assert search(spec, hw, 4, 4096).notes == []


@pytest.mark.parametrize("framework", ["ddp", "fsdp1", "torchtune"])
def test_data_parallel_frameworks_get_data_parallel_layouts_only(framework: str) -> None:
    """`--framework ddp` recommended dp2 tp2+sp pp2 1f1b, `--framework torchtune` dp4 tp2+sp for llama3-8b on 8."""
    spec, hw = parse_model_spec("llama3-8b"), _hw()
    lays = candidate_layouts(spec, hw, 8, 512, framework=framework)
    assert lays and all(lay.tp == 1 and lay.pp == 1 and lay.cp == 1 and lay.dp == 8 for lay in lays)
    assert {lay.zero for lay in lays} == set(PARALLELISM[framework].zero)
    small = parse_model_spec("layers=4,hidden=256,heads=8,vocab=1000,seq=512")
    res = search(small, hw, 8, 512, framework=framework)
    assert res.best is not None and (res.best.layout.tp, res.best.layout.pp) == (1, 1)


def test_a_model_ddp_cannot_hold_fits_nowhere_and_says_why() -> None:
    res = search(parse_model_spec("llama3-8b"), _hw(), 8, 512, framework="ddp")
    assert res.best is None and res.rejected_memory  # the CLI's "no layout fits in memory", exit 1
    assert any("ddp runs no tensor or pipeline parallelism" in n for n in res.notes)


def test_torchtune_shards_with_fsdp_and_fits_an_8b_model_on_8() -> None:
    best = search(parse_model_spec("llama3-8b"), _hw(), 8, 512, framework="torchtune").best
    assert best is not None and (best.layout.dp, best.layout.tp, best.layout.pp, best.layout.zero) == (8, 1, 1, 3)


def test_deepspeed_pipelines_only_with_zero_0_or_1_and_megatron_still_gets_everything() -> None:
    spec, hw = parse_model_spec("llama3-8b"), _hw()
    ds = candidate_layouts(spec, hw, 8, 512, framework="deepspeed")
    assert {lay.zero for lay in ds if lay.pp > 1} <= {0, 1} and {lay.zero for lay in ds if lay.pp == 1} >= {2, 3}
    assert any(lay.tp > 1 for lay in ds)
    mt = candidate_layouts(spec, hw, 8, 512, framework="maxtext")
    assert all(lay.pp == 1 for lay in mt) and any(lay.tp > 1 for lay in mt)
    mg = candidate_layouts(spec, hw, 8, 512, framework="megatron")
    assert any(lay.tp > 1 for lay in mg) and any(lay.pp > 1 for lay in mg)
    assert any(lay.schedule == "interleaved" for lay in mg)
