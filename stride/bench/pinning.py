"""One core per rank: the core plan a world-size sweep reports, and the pinning each rank applies.

On a small CPU box a scaling figure only means something when N ranks get N cores and the 1-rank
baseline gets one core too (an unpinned baseline borrows the idle cores for its intra-op threads and
the efficiency then measures that). The parent decides the plan (`core_plan`) and hands it to the
ranks in `STRIDE_PIN_CORES`; each rank pins every thread it has to `cores[LOCAL_RANK % len(cores)]`
before torch starts its thread pools (`pin_from_env`). More ranks than cores share cores round-robin:
the plan says so (`oversubscribed`), and an efficiency measured that way describes the box, not the code.

`stride train --nproc N` on CPU pins its ranks with the same `pin_threads` by default (stride.train.rank_cores,
`parallel.pin_ranks`): each rank on `train.threads` cores of its own where N x train.threads fit the usable cores.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from stride.files.rank_share import PINNED_APART_ENV
from stride.metrics.env import available_cores
from stride.train.rank_cores import pin_threads

__all__ = ["ENV", "CorePlan", "core_plan", "pin_from_env", "pin_threads"]

ENV = "STRIDE_PIN_CORES"  # comma-separated core ids, in rank order; absent: no pinning


@dataclass(frozen=True)
class CorePlan:
    world_size: int
    cores: tuple[int, ...]  # the cores this process may use (its affinity), in the order ranks get them
    pinned: bool  # False where the OS has no sched_setaffinity, or pinning was not wanted (GPU runs)
    reason: str = ""  # why not pinned

    @property
    def assignment(self) -> list[int]:
        """Core of each local rank (round-robin when there are more ranks than cores)."""
        return [self.cores[r % len(self.cores)] for r in range(self.world_size)] if self.pinned else []

    @property
    def ranks_per_core(self) -> float:
        return self.world_size / len(self.cores) if self.cores else float(self.world_size)

    @property
    def oversubscribed(self) -> bool:
        """More ranks than cores: ranks time-share cores, so per-rank throughput drops for that reason."""
        return self.world_size > len(self.cores)

    def describe(self) -> str:
        if not self.pinned:
            return f"{self.world_size} rank(s), not pinned ({self.reason})"
        where = ", ".join(f"rank {r} on core {c}" for r, c in enumerate(self.assignment))
        text = f"{self.world_size} rank(s) on {len(self.cores)} core(s), one intra-op thread each: {where}"
        if self.oversubscribed:
            text += (f": OVERSUBSCRIBED ({self.ranks_per_core:g} ranks per core), efficiency here reflects "
                     "time-sharing of cores, not the code")
        return text

    def env(self) -> dict[str, str]:
        return {ENV: ",".join(map(str, self.assignment))} if self.pinned else {}


def core_plan(world_size: int, pin: bool = True, cores: tuple[int, ...] | None = None) -> CorePlan:
    cores = cores if cores is not None else available_cores()
    if not pin:
        return CorePlan(world_size, cores, False, "not requested (GPU ranks: use torchrun --numa-binding)")
    if not hasattr(os, "sched_setaffinity"):
        return CorePlan(world_size, cores, False, "this OS has no sched_setaffinity")
    return CorePlan(world_size, cores, True)


def pin_from_env() -> int | None:
    """In a rank: pin to this local rank's core from `STRIDE_PIN_CORES`; returns the core (None: unpinned)."""
    raw = os.environ.get(ENV)
    if not raw or not hasattr(os, "sched_setaffinity"):
        return None
    cores = [int(c) for c in raw.split(",")]
    core = cores[int(os.environ.get("LOCAL_RANK", "0")) % len(cores)]
    pin_threads(core)
    os.environ[PINNED_APART_ENV] = "1"
    return core
