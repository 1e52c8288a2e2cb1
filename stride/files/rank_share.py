"""How many ranks share this process's cores: read by the threads warning (stride.train.resources), each rank's CPU
peak (stride.metrics.cpu_isa) and the data probe's per-rank cores (stride.data.probe), which must agree on it. At the
bottom (stride.files) so that every layer above reads this one rule."""

from __future__ import annotations

import os

# Set (to "1") by what pins each rank to cores of its own (stride.bench.pinning, stride.perfmodel.local_runs): the
# threads warning then counts this process's threads against its own cores, not every rank's against them. An
# affinity smaller than the host alone does not say so: a container's cpuset gives all its ranks one smaller set.
PINNED_APART_ENV = "STRIDE_RANKS_PINNED_APART"


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity), as the data probe counts them."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def ranks_sharing_cores(here: int | None = None, default: int | None = 1) -> int | None:
    """The ranks whose threads share this process's cores: 1 for a rank pinned apart, else `here` where the caller
    knows it, else torchrun's LOCAL_WORLD_SIZE, else `default`."""
    if os.environ.get(PINNED_APART_ENV) == "1":
        return 1
    if here is not None:
        return here
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(local) if local.isdigit() and int(local) > 0 else default
