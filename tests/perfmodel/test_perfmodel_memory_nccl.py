"""Device memory counts the NCCL communicators' buffers: NCCL allocates them itself, outside torch's caching
allocator, so they show in nvidia-smi's figure (the `device` kind) and not in max_memory_allocated / reserved."""

from __future__ import annotations

import dataclasses

import pytest

from stride.perfmodel.costmodel import predict
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.layout import Layout
from stride.perfmodel.memory_model import NCCL_COMM_BYTES, nccl_buffer_bytes
from stride.perfmodel.model_spec import PRESETS

MIB = 2**20


def test_one_device_has_no_communicator() -> None:
    h100 = load_catalog().get("h100-sxm")
    assert nccl_buffer_bytes(Layout(framework="fsdp2"), h100) == 0.0


def test_the_world_group_and_one_per_parallel_dimension() -> None:
    """Pure data parallelism uses the default (world) group only; each dimension smaller than the world adds its
    own communicator, a 2-rank one the smaller measured size (NVIDIA/nccl#964: 544 / 688 MiB)."""
    h100 = load_catalog().get("h100-sxm")
    assert NCCL_COMM_BYTES == {2: 544 * MIB, 3: 688 * MIB}
    assert nccl_buffer_bytes(Layout(dp=8, zero=3, framework="fsdp2"), h100) == 688 * MIB
    assert nccl_buffer_bytes(Layout(dp=4, tp=2, framework="megatron"), h100) == (688 + 688 + 544) * MIB
    assert nccl_buffer_bytes(Layout(tp=8, framework="megatron"), h100) == 688 * MIB  # the tp group is the world
    assert nccl_buffer_bytes(Layout(dp=8, tp=8, pp=8, cp=2, framework="megatron"), h100) == (4 * 688 + 544) * MIB


def test_no_nccl_on_tpus_or_cpu_hosts() -> None:
    catalog = load_catalog()
    lay = Layout(dp=8, zero=3, framework="maxtext")
    assert nccl_buffer_bytes(lay, catalog.get("tpu-v5p")) == 0.0
    assert nccl_buffer_bytes(dataclasses.replace(lay, framework="ddp", zero=0), catalog.get("epyc-9654")) == 0.0


def test_only_the_device_figure_carries_the_buffers() -> None:
    """allocated and reserved (torch's own counters) do not move; device = reserved + runtime + NCCL."""
    h100 = load_catalog().get("h100-sxm")
    spec = PRESETS["llama3-8b"]
    one = predict(spec, Layout(micro_batch=1, recompute="full", framework="fsdp2"), h100, 1)
    many = predict(spec, Layout(dp=8, zero=3, micro_batch=1, recompute="full", framework="fsdp2"), h100, 8)
    assert one.peak_mem_bytes == pytest.approx(one.reserved_bytes + h100.runtime_overhead_gib * 2**30)
    assert many.peak_mem_bytes == pytest.approx(many.reserved_bytes + h100.runtime_overhead_gib * 2**30 + 688 * MIB)
    assert many.memory_bytes["runtime"] == pytest.approx(h100.runtime_overhead_gib * 2**30 + 688 * MIB)


def test_a_memory_kind_the_row_rules_out_is_not_read() -> None:
    """BLOOM's benchmark notes: "nvidia-smi memory used ..., not torch max allocated" was read as `allocated`, so
    its six rows were scored against torch's counter (-40%) when they measure the device."""
    from stride.perfmodel.row_text import memory_kind

    assert memory_kind("Mem column = nvidia-smi memory used (pdsh nvidia-smi snapshot), not torch max allocated.") \
        == "device"
    assert memory_kind("not reserved; max allocated") == "allocated"
    assert memory_kind("not torch.cuda.max_memory_allocated; nvidia-smi") == "device"
    assert memory_kind("torch.cuda.max_memory_reserved") == "reserved"
    assert memory_kind("Peak Memory Active") == "allocated"
