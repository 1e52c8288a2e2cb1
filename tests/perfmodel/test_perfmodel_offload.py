"""Host offload (offload.py): optimizer states and step, sharded parameters, saved activations on the host. The
reading of the row words that name it, what it takes off the device, and what it adds to the step, each against
the formula worked by hand; and the planner turning to it only when nothing fits on the devices."""

from __future__ import annotations

import dataclasses

import pytest

from stride.config.errors import ConfigError
from stride.perfmodel import offload as off
from stride.perfmodel.block_time import exposed
from stride.perfmodel.costmodel import predict
from stride.perfmodel.efficiency import EFFICIENCY_FILE, load_efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.layout import Layout
from stride.perfmodel.model_spec import TransformerSpec
from stride.perfmodel.planner import search
from stride.perfmodel.row_text import offload_switches, recompute, zero_stage

CAT = load_catalog()
EFF = load_efficiency(EFFICIENCY_FILE)
SPEC = TransformerSpec(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, act="swiglu", vocab=128256, seq=4096)
BASE = Layout(dp=4, zero=3, micro_batch=1, recompute="full", framework="deepspeed")


@pytest.mark.parametrize(("zero_text", "rc_text", "want"), [
    ("ZeRO-3; offload_optimizer device cpu and --cpu-optimizer", "", (True, False, 0)),
    ("ZeRO-2 with ZeRO-Offload", "", (True, False, 0)),
    ("ZeRO-3, offload_param cpu, offload_optimizer cpu", "", (True, True, 0)),
    ("PyTorch FSDP (full sharding) with parameter CPU offloading (cpu_offload)", "", (True, True, 0)),
    ("distributed optimizer (no CPU offloading)", "", (False, False, 0)),
    ("zero3, offload_optimizer: false", "", (False, False, 0)),
    ("", "no recompute; activation CPU offloading cpu_offloading_num_layers=20 (cpu_offloading_weights False)",
     (False, False, 20)),
    ("", "activation offloading to CPU", (False, False, -1)),
    ("", "cpu_offloading_num_layers=None", (False, False, 0)),
    ("", "remat_policy=qkv_proj_offloaded", (False, False, 0)),  # MaxText's policy: remat, not host offload
    # each clause alone (review of 2026-12-06, M3): a "none" beside another clause's offload cancels only its own
    ("offload_param: none, offload_optimizer: cpu", "", (True, False, 0)),
    ("offload_optimizer: cpu, offload_param: none", "", (True, False, 0)),
    ("ZeRO-3 with offload, pin_memory=false", "", (True, False, 0)),
    ("ZeRO-3 w/o offload", "", (False, False, 0)),
    ("ZeRO-3 with CPU offload", "", (True, False, 0)),  # DeepSpeed's "CPU offload": the optimizer
    ("", "offload 10 layers", (False, False, 10)),
])
def test_offload_words(zero_text: str, rc_text: str, want: tuple) -> None:
    assert offload_switches(zero_text, rc_text) == want


def test_offload_words_leave_the_zero_stage_and_recompute_mode_alone() -> None:
    assert zero_stage("ZeRO-3 + offload")[0] == 3 and zero_stage("ZeRO-2 with ZeRO-Offload")[0] == 2
    assert recompute("no recompute (granularity None); activation offloading cpu_offloading_num_layers=20") == "none"
    assert recompute("full; activation offloading") == "full"
    with pytest.raises(ValueError, match="NVMe"):
        zero_stage("ZeRO-Infinity (NVMe)")


def test_optimizer_offload_takes_the_states_off_the_device_and_runs_the_step_on_the_host() -> None:
    hw = CAT.get("a100-80gb")
    base = predict(SPEC, BASE, hw, 64, EFF)
    lay = dataclasses.replace(BASE, offload_optimizer=True)
    got = predict(SPEC, lay, hw, 64, EFF)
    assert base.memory_bytes["optimizer"] > 0 and got.memory_bytes["optimizer"] == 0
    assert got.memory_bytes["params"] == base.memory_bytes["params"]
    shard = max(got.memory_bytes["params"] / 2, 1)  # 16-bit ZeRO-3 shard of this rank: params bytes / 2
    cpu = shard * off.CPU_ADAM_BYTES_PER_PARAM / (50e9 * off.CPU_OPTIMIZER_EFFICIENCY)
    assert got.breakdown_s["optimizer"] == pytest.approx(cpu, rel=0.02)
    # the updated 16-bit shard comes back over PCIe Gen4 (32 GB/s at 80%) after the step: never hidden
    assert got.breakdown_s["offload"] >= shard * 2 / (32e9 * off.HOST_COPY_EFFICIENCY) * 0.99
    assert got.step_time_s > base.step_time_s


def test_a_faster_host_makes_offload_cheaper() -> None:
    lay = dataclasses.replace(BASE, offload_optimizer=True, offload_params=True)
    slow = predict(SPEC, lay, CAT.get("h100-sxm"), 64, EFF)
    fast = predict(SPEC, lay, CAT.get("gh200"), 64, EFF)  # NVLink-C2C 450 GB/s, LPDDR5X 500 GB/s
    assert fast.breakdown_s["offload"] < slow.breakdown_s["offload"] / 5
    assert fast.breakdown_s["optimizer"] == pytest.approx(slow.breakdown_s["optimizer"] / 10, rel=1e-6)


def test_parameter_offload_needs_sharding_and_frees_the_shard() -> None:
    with pytest.raises(ConfigError, match="zero = 3"):
        predict(SPEC, dataclasses.replace(BASE, zero=1, offload_params=True), CAT.get("a100-80gb"), 64, EFF)
    got = predict(SPEC, dataclasses.replace(BASE, offload_optimizer=True, offload_params=True),
                  CAT.get("a100-80gb"), 64, EFF)
    assert got.memory_bytes["params"] == 0 and got.comm_bytes_per_device["host"] > 0


def test_activation_offload_moves_blocks_saved_tensors_over_the_host_link() -> None:
    hw = CAT.get("h100-sxm")
    lay = Layout(dp=8, zero=1, micro_batch=1, recompute="none", framework="megatron")
    base = predict(SPEC, lay, hw, 64, EFF)
    got = predict(SPEC, dataclasses.replace(lay, offload_activations=16), hw, 64, EFF)
    per_block = base.memory_bytes["activations"] / SPEC.layers
    # 16 of the 32 blocks leave the device, one block's worth stays in flight
    assert got.memory_bytes["activations"] == pytest.approx(base.memory_bytes["activations"] - 15 * per_block,
                                                            rel=0.02)
    link = 64e9 * off.HOST_COPY_EFFICIENCY
    one_way = 16 * per_block / link
    # 8 micro-batches a step, out in forward and in in backward: between the part left exposed under a long
    # enough pass and the whole copy
    assert 8 * 2 * exposed(one_way, 1e9, EFF) * 0.99 <= got.breakdown_s["offload"] <= 8 * 2 * one_way
    assert got.step_time_s >= base.step_time_s


def test_the_planner_turns_to_offload_only_when_nothing_fits() -> None:
    res = search(SPEC, CAT.get("rtx-4090"), 4, 64, EFF, framework="deepspeed")
    assert res.ranked and all("offload" in p.layout.short() for p in res.ranked)
    assert any("host offload" in n for n in res.notes)
    roomy = search(SPEC, CAT.get("h100-sxm"), 8, 64, EFF, framework="deepspeed")
    assert roomy.ranked and not any("offload" in p.layout.short() for p in roomy.ranked + roomy.rejected_memory)


def test_deepspeed_sends_every_micro_batch_and_keeps_16_bit_gradients() -> None:
    """ZeRO-Offload accumulates on the host: m micro-batches move m gradient shards out and m - 1 sums back (review
    of 2026-12-06, M7); the device keeps no gradient partition (each goes to the host's fp32 buffer)."""
    hw = CAT.get("a100-80gb")
    lay = dataclasses.replace(BASE, offload_optimizer=True)
    one, many = predict(SPEC, lay, hw, 4, EFF), predict(SPEC, lay, hw, 64, EFF)  # 1 and 16 micro-batches a replica
    assert many.comm_bytes_per_device["host"] > 20 * one.comm_bytes_per_device["host"]
    assert one.memory_bytes["grads"] == 0


def test_offload_is_planned_on_one_device_and_never_on_a_cpu_host() -> None:
    one = search(SPEC, CAT.get("rtx-4090"), 1, 8, EFF, framework="deepspeed")
    assert one.ranked and all("offload" in p.layout.short() for p in one.ranked)
    cpu = search(TransformerSpec(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, act="swiglu",
                                 vocab=128256, seq=4096), CAT.get("epyc-9654"), 2, 8, EFF, framework="deepspeed")
    assert not any("offload" in p.layout.short() for p in cpu.ranked + cpu.rejected_memory)
