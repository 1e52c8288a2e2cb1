"""This process's rank and the world size, whether or not a process group exists."""

from __future__ import annotations

import torch.distributed as dist


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of the default process group; (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
