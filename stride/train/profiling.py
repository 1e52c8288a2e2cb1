"""Run training under `torch.profiler` with a wait / warm-up / active schedule, one trace per rank.

The trainer already annotates data, forward, backward and optimizer with `record_function`
(`stride.data`, ...), so traces carry the same phases as the trainer's own step breakdown; only while
a profiler records (`phase_range`): outside one a range would cost ~6 us (4 a step), for nothing.

Every rank's trace carries the run's id (`stride_run_id`, one random id rank 0 draws and sends to the others at
the start): `stride analyze` refuses traces of two runs by it. Without it, two runs recorded over the same second
on different hosts look like ranks of one (the same world size, ranks 0 and 1, overlapping times; Kineto writes
no run identity of its own), and only their collectives, where there are any, can tell them apart.

Each trace also records the host's usable cores, the rank's intra-op threads and the ranks on the host
(`stride_host`: whether gloo's thread had a core of its own, so that its collectives could hide compute), and the
median of the unprofiled steps before the profiler starts (`stride_unprofiled_step`: the wait steps after the first,
timed between step ends as a `ProfilerStep` is): the analysis sets it beside the traced step, whose per-operator
profiler cost shows as idle (`stride.profile.run_meta`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from stride.files.rank_share import ranks_sharing_cores, usable_cores
from stride.parallel.ranks import rank_and_world
from stride.profile.one_run import RUN_ID_KEY
from stride.profile.run_meta import HOST_KEY, UNPROFILED_KEY
from stride.train.callbacks import Callback, TrainerView

profiling_active = torch._C._autograd._profiler_enabled  # torch.profiler or the autograd profiler records
_NULL = contextlib.nullcontext()


def shared_run_id() -> str:
    """One random id for the run, the same on every rank: rank 0 draws it and broadcasts it (one collective at the
    start of profiling, on the default group every rank is in)."""
    box = [uuid.uuid4().hex]
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(box, src=0)
    return str(box[0])


def host_metadata() -> dict[str, int | None]:
    """The host's usable cores, this rank's intra-op threads and the ranks on its host (LOCAL_WORLD_SIZE, as
    torchrun sets it; 1 without a process group; None where neither says). A rank pinned to cores of its own counts
    as the one rank on those cores: its affinity is what it shares with nobody (`ranks_sharing_cores`)."""
    ranks = ranks_sharing_cores(default=1 if rank_and_world()[1] == 1 else None)
    return {"cores": usable_cores(), "intra_op_threads": torch.get_num_threads(), "ranks_on_host": ranks}


def phase_range(name: str) -> contextlib.AbstractContextManager[Any]:
    """A `record_function` range for a profiler trace where a profiler records, else a shared no-op."""
    return record_function(name) if profiling_active() else _NULL


class ProfilerCallback(Callback):
    def __init__(self, out_dir: str | Path | None = None, wait: int = 4, warmup: int = 1, active: int = 3) -> None:
        """`out_dir` None: `<run directory>/traces` (or ./traces when the run writes no directory). `wait` steps
        run unprofiled: those after the first are timed (4: a median of 3, which one slow step does not move)."""
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.wait, self.warmup, self.active = wait, warmup, active
        self.trace_path: Path | None = None
        self.active_step_times: list[dict[str, float]] = []  # the trainer's timers for the traced steps
        self._prof: profile | None = None
        self._n = 0
        self.run_id: str | None = None
        self._ends: list[float] = []  # perf_counter at the end of each wait step
        self.unprofiled_step_s: float | None = None

    def _export(self, prof: profile) -> None:
        assert self.out_dir is not None
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / f"trace_rank{rank_and_world()[0]}.json"
        tmp = path.with_name(path.name + ".tmp")
        prof.export_chrome_trace(str(tmp))
        tmp.replace(path)  # a half-written trace never carries the final name
        self.trace_path = path

    def on_fit_start(self, trainer: TrainerView) -> None:
        if self.out_dir is None:
            self.out_dir = (trainer.run_dir.path if trainer.run_dir else Path(".")) / "traces"
        acts = [ProfilerActivity.CPU]
        if trainer.device.type == "cuda":
            acts.append(ProfilerActivity.CUDA)
        self._prof = profile(
            activities=acts,
            schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1),
            on_trace_ready=self._export, record_shapes=True, profile_memory=True, with_stack=False,
        )
        self.run_id = shared_run_id()
        self._prof.preset_metadata_json(RUN_ID_KEY, json.dumps(self.run_id))  # written into the trace at export
        self._prof.preset_metadata_json(HOST_KEY, json.dumps(host_metadata()))
        self._prof.start()

    def on_step_end(self, trainer: TrainerView) -> None:
        assert self._prof is not None
        self._n += 1
        if self._n <= self.wait:
            self._ends.append(time.perf_counter())
            if self._n == self.wait and len(self._ends) > 1:  # before the step that starts the profiler
                steps = [b - a for a, b in itertools.pairwise(self._ends)]
                self.unprofiled_step_s = statistics.median(steps)
                self._prof.preset_metadata_json(UNPROFILED_KEY, json.dumps(
                    {"median_us": self.unprofiled_step_s * 1e6, "steps_us": [x * 1e6 for x in steps]}))
        if self.wait + self.warmup < self._n <= self.wait + self.warmup + self.active:
            self.active_step_times.append(dict(trainer.timer.last))
        self._prof.step()

    def on_fit_end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        if self._prof is not None:
            self._prof.stop()
            self._prof = None
        summary["profile_trace"] = str(self.trace_path) if self.trace_path else None


    def on_fit_abort(self, trainer: TrainerView, exc: BaseException) -> None:
        if self._prof is not None:  # a profiler left on would refuse the next one in this process
            self._prof.stop()
            self._prof = None


def steps_needed(wait: int, warmup: int, active: int) -> int:
    """Steps for one full schedule cycle plus the step whose start closes the last active one."""
    return wait + warmup + active + 1

