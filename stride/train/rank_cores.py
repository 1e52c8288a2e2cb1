"""The cores a rank of a launcher runs on: `stride train --nproc N` on CPU pins each rank to cores of its own.

Why (measured, docs/parallel.md "Ranks on cores of their own"): on a quiet 2-core host, 2 ranks of the tiny FSDP2
transformer at 1 thread each took 51.0 ms a step unpinned against 43.9 ms pinned (median of 3 alternated runs; a small
DDP transformer 150.0 against 146.6 ms). Unpinned, the scheduler moves each rank's main thread between the cores
(20-33 migrations in a 30-step run against 3). On a host that other processes keep busy a pinned rank cannot move off
a busy core, and its partner waits for it at every collective: `auto` leaves the ranks unpinned where the cores they
need were not idle at launch.

Each rank decides alone, from what every rank sees alike (the config, torchrun's LOCAL_WORLD_SIZE, the affinity the
launcher gave them all), so the ranks agree without talking: local rank r gets the r-th block of `train.threads`
cores of the affinity (`plan_rank_pinning`). It happens in the Trainer before anything starts a thread (the data
probe counts this process's cores; torch's pool and gloo's threads inherit the affinity). `pin_threads` is the one
pinning call, shared with `stride bench`'s world sweep (stride.bench.pinning), which pins its ranks itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from stride.files.rank_share import PINNED_APART_ENV
from stride.metrics.env import available_cores

# set for its ranks by `stride train --nproc` (stride.launch.lifeline.ENV_LAUNCHER, a layer above this one)
LAUNCHED_BY_STRIDE_ENV = "STRIDE_LAUNCHER_PID"
# idle cores of the launcher's affinity just before it started torchrun (stride.launch.torchrun.HOST_IDLE_ENV)
HOST_IDLE_ENV = "STRIDE_HOST_IDLE_CORES"
# auto pins where the cores the ranks need were idle at launch, give or take this much of a core
IDLE_SLACK = 0.5
PinSetting = Literal["auto"] | bool
log = logging.getLogger("stride.config")


def pin_threads(core: int | Iterable[int]) -> None:
    """Pin this process and every thread it already has to `core` (or a set of cores; threads made later inherit
    it)."""
    where = {core} if isinstance(core, int) else set(core)
    task_dir = "/proc/self/task"
    tids = [int(t) for t in os.listdir(task_dir)] if os.path.isdir(task_dir) else [0]
    for tid in tids:
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(tid, where)


_applied: list[RankPinning] = []  # the pinning this process applied (at most one)


@dataclass(frozen=True)
class RankPinning:
    """What a rank of a launcher did about cores (summary.json `rank_pinning`)."""

    setting: PinSetting  # parallel.pin_ranks
    pinned: bool
    cores: tuple[tuple[int, ...], ...] = ()  # each local rank's cores, in local rank order (empty: not pinned here)
    reason: str = ""  # why (not) pinned

    def record(self) -> dict[str, Any]:
        return {"setting": self.setting, "pinned": self.pinned,
                "cores_by_local_rank": [list(c) for c in self.cores] or None, "reason": self.reason}


def rank_core_sets(ranks: int, per_rank: int, cores: tuple[int, ...]) -> tuple[tuple[int, ...], ...] | None:
    """`per_rank` cores of `cores` for each of `ranks` local ranks, apart and in order; None where they do not fit."""
    if ranks < 1 or per_rank < 1 or ranks * per_rank > len(cores):
        return None
    return tuple(tuple(cores[r * per_rank:(r + 1) * per_rank]) for r in range(ranks))


def plan_rank_pinning(setting: PinSetting, *, on_cpu: bool, local_world: int, threads: int | None,
                      cores: tuple[int, ...], by_stride: bool, affinity_call: bool = True,
                      idle: float | None = None) -> RankPinning:
    """Which cores each local rank gets (the same answer on every rank: they share the launcher's affinity).

    auto pins the CPU ranks of `stride train --nproc` (`by_stride`) where local ranks x `train.threads` (1 where
    unset: the launcher's OMP_NUM_THREADS) fit the usable cores; true pins any launcher's ranks, a GPU run's too
    (`train.threads` cores each, or an equal share of the cores where it is unset), where they fit; false never.
    auto also leaves the ranks unpinned where fewer of the cores were `idle` at launch than they need (other
    processes kept them busy): a pinned rank cannot move off a busy core, and its partners wait for it."""
    if setting is False:
        return RankPinning(setting, False, reason="parallel.pin_ranks = false")
    if setting == "auto" and not by_stride:
        return RankPinning(setting, False, reason="not started by `stride train --nproc` (parallel.pin_ranks = true "
                                                  "pins the ranks of any launcher)")
    if setting == "auto" and local_world < 2:
        return RankPinning(setting, False, reason="one rank on this host: no other rank to keep off its cores")
    if setting == "auto" and not on_cpu:
        return RankPinning(setting, False, reason="a GPU run: not measured (parallel.pin_ranks = true pins it)")
    if not affinity_call:
        return RankPinning(setting, False, reason="this OS has no sched_setaffinity")
    per_rank = threads if threads is not None else (1 if on_cpu else max(len(cores) // max(local_world, 1), 1))
    sets = rank_core_sets(local_world, per_rank, cores)
    if sets is None:
        return RankPinning(setting, False, reason=f"{local_world} local ranks x {per_rank} thread(s) do not fit the "
                                                  f"{len(cores)} usable cores: the ranks share them")
    need = local_world * per_rank
    if setting == "auto" and idle is not None and idle + IDLE_SLACK < need:
        return RankPinning(setting, False, reason=f"the host was busy at launch: {idle:.2f} of the {len(cores)} usable "
                                                  f"cores idle, {need} needed; unpinned ranks can move off a busy core "
                                                  "(parallel.pin_ranks = true pins them anyway)")
    return RankPinning(setting, True, sets, reason=f"{local_world} local ranks x {per_rank} core(s) each, apart")


def pin_this_rank(setting: PinSetting, on_cpu: bool, threads: int | None) -> RankPinning | None:
    """In a rank of a launcher (torchrun's LOCAL_RANK): pin this process's threads to its cores per
    `plan_rank_pinning`, before torch starts its thread pools and gloo its threads. None outside a launcher.

    A rank its launcher pinned already (`stride bench`'s world sweep, `stride plan`'s local runs: `PINNED_APART_ENV`)
    is left as it is."""
    local = os.environ.get("LOCAL_RANK", "")
    if not local.isdigit():
        return None
    if _applied:  # a second trainer in this rank: the first one's pinning holds
        return _applied[-1]
    if os.environ.get(PINNED_APART_ENV) == "1":
        return RankPinning(setting, True, reason="pinned by its launcher (stride bench, stride plan's local runs)")
    world = os.environ.get("LOCAL_WORLD_SIZE", "")
    plan = plan_rank_pinning(setting, on_cpu=on_cpu, local_world=int(world) if world.isdigit() else 1,
                             threads=threads, cores=available_cores(),
                             by_stride=bool(os.environ.get(LAUNCHED_BY_STRIDE_ENV)), idle=_idle_at_launch(),
                             affinity_call=hasattr(os, "sched_setaffinity"))
    if plan.pinned:
        pin_threads(plan.cores[int(local) % len(plan.cores)])
        os.environ[PINNED_APART_ENV] = "1"
        _applied.append(plan)
    elif setting is True and local == "0":
        log.warning("stride: warning: parallel.pin_ranks = true, but the ranks were not pinned: %s", plan.reason)
    return plan


def _idle_at_launch() -> float | None:
    try:
        return float(os.environ[HOST_IDLE_ENV])
    except (KeyError, ValueError):
        return None
