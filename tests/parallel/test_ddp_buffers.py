"""DDP broadcasts buffers only where they are model state (a per-step sync point otherwise wasted)."""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from stride.config.schema import ParallelConfig
from stride.models.transformer import TimeSeriesTransformer
from stride.parallel.data_parallel import apply_ddp, buffer_sync_kwargs, persistent_buffers


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
        def syncs(m: nn.Module) -> bool:  # torch 2.13's attribute, or the older one (torch 2.11)
            return m.forward_sync_buffers if hasattr(m, "forward_sync_buffers") else m.broadcast_buffers

        assert not syncs(rope_model) and syncs(bn_model)
    finally:
        dist.destroy_process_group()


def test_the_buffer_switch_goes_by_this_torchs_name_for_it() -> None:
    """torch 2.13 calls it forward_sync_buffers; torch 2.11 (the H200 image's) knows only broadcast_buffers and
    refused the new name, which failed every DDP run there."""

    class New:
        def __init__(self, module: object, forward_sync_buffers: bool = True, broadcast_buffers: bool = True) -> None:
            pass

    class Old:
        def __init__(self, module: object, broadcast_buffers: bool = True) -> None:
            pass

    assert buffer_sync_kwargs(New, False) == {"forward_sync_buffers": False}
    assert buffer_sync_kwargs(Old, True) == {"broadcast_buffers": True}
