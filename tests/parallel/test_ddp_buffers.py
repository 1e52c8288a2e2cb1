"""DDP broadcasts buffers only where they are model state (a per-step sync point otherwise wasted)."""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from stride.config.schema import ParallelConfig
from stride.models.transformer import TimeSeriesTransformer
from stride.parallel.data_parallel import apply_ddp, persistent_buffers


def test_persistent_buffers_are_the_state_dict_ones() -> None:
    assert persistent_buffers(TimeSeriesTransformer(7, 16, 3)) == {}  # RoPE tables: derived, not saved
    bn = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    assert set(persistent_buffers(bn)) == {"1.running_mean", "1.running_var", "1.num_batches_tracked"}


def test_ddp_broadcasts_only_models_with_persistent_buffers(tmp_path) -> None:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        cpu, p = torch.device("cpu"), ParallelConfig(comm_timing=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)  # torch 2.13 deprecates `broadcast_buffers`
            rope_model, _ = apply_ddp(TimeSeriesTransformer(7, 16, 3), mesh, p, cpu)
            bn_model, _ = apply_ddp(nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)), mesh, p, cpu)
        assert not rope_model.forward_sync_buffers and bn_model.forward_sync_buffers
    finally:
        dist.destroy_process_group()
