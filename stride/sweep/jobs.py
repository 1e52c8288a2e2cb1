"""One pack's work, the same in this process and in a Ray task: train it, hand back each finished point.

A pack of one point (or any pack when packing is off) is an ordinary `stride train` run of that point,
with its own run directory; a larger pack is one `PackedTrainer`. Either way each point comes back as
{"id", "mode", "summary", "history", "state"}, where `state` is what `stride sweep --export` turns into a
checkpoint.

A point's run directory (`runs/<id>`) is handed to the Trainer with `overwrite=True`: the sweep trains a point
only when it has no point file, so whatever that folder holds is an attempt that did not finish (a kill, Ctrl-C,
SIGTERM), which the rerun replaces. Before, the Trainer refused it ("holds an earlier run's metrics.jsonl") and
"run the same command again to resume it" failed with exit status 2 for every point trained alone (audit 10, F1).
"""

from __future__ import annotations

import copy
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stride.config import RunConfig
from stride.config.errors import ConfigError
from stride.metrics.contention import WaitClock
from stride.train.callbacks import Callback

LOG_KEYS = ("step", "loss", "val_loss", "lr", "time_s")


@dataclass
class PackJob:
    index: int
    ids: list[str]
    configs: list[RunConfig]
    solo: bool  # train the points one by one with the ordinary Trainer
    out: str  # the sweep directory (solo points write their run directory under runs/<id>)
    chunk: int | None = None  # models a packed step trains at once (None: stride.sweep.packed_model.default_chunk)


class StopCheck(Callback):
    """Trainer callback: asks the sweep's stop request after every step (stride.sweep.stop), so SIGTERM or Ctrl-C
    ends a point trained alone between two steps, as it ends a pack."""

    def __init__(self, check: Callable[[], None]) -> None:
        self.check = check

    def on_step_end(self, trainer: Any) -> None:
        self.check()


def _quiet(cfg: RunConfig) -> RunConfig:
    c = copy.deepcopy(cfg)
    c.metrics.progress = False
    return c


def run_job(job: PackJob, on_point: Callable[[dict[str, Any]], None] | None = None,
            check: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Train `job`; each point is passed to `on_point` as soon as it is finished, and all are returned. `check`
    (the sweep's stop request) is called after every training step and raises to stop."""
    done: list[dict[str, Any]] = []

    def emit(item: dict[str, Any]) -> None:
        item["history"] = [{k: v for k, v in h.items() if k in LOG_KEYS} for h in item["history"]]
        item["pack"] = {"index": job.index, "size": len(job.ids), "members": list(job.ids)}
        done.append(item)
        if on_point is not None:
            on_point(item)

    if job.solo:
        from stride.sweep.export import solo_state
        from stride.train.divergence import TrainingDiverged
        from stride.train.trainer import Trainer

        for pid, cfg in zip(job.ids, job.configs, strict=True):
            run_dir = Path(job.out) / "runs" / pid
            # no point file, so runs/<id> can only hold an unfinished attempt: replaced (module docstring)
            trainer = Trainer(config=_quiet(cfg), out=run_dir, overwrite=True,
                              callbacks=[StopCheck(check)] if check is not None else None)
            try:
                result = trainer.fit()
                summary = dict(result.summary, status="target" if result.summary.get("time_to_target_s") else "done")
            except TrainingDiverged as exc:  # a result like a packed model's divergence (its loss: none)
                summary = dict(exc.summary, final_train_loss=None)
            emit({"id": pid, "mode": "solo", "summary": summary, "history": list(trainer.history),
                  "state": solo_state(trainer), "run_dir": str(run_dir)})
        return done

    from stride.sweep.packed_train import PackedTrainer

    pt = PackedTrainer([_quiet(c) for c in job.configs], chunk=job.chunk)

    def stopped(i: int) -> None:
        rec = pt.records[i]
        emit({"id": job.ids[i], "mode": "packed", "summary": rec.summary, "history": rec.history,
              "state": pt.model_state(i), "run_dir": None})

    try:
        pt.fit(on_stop=stopped, check=check)
    finally:
        pt.close()
    return done


def failure_of(exc: BaseException) -> dict[str, str]:
    """A pack's error as the sweep records it: one line (the exception's type and first line) and the traceback."""
    first = (str(exc).strip().splitlines() or [""])[0]
    line = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return {"error": line[:300], "traceback": "".join(traceback.format_exception(exc))}


def run_job_caught(job: PackJob, on_point: Callable[[dict[str, Any]], None] | None = None,
                   check: Callable[[], None] | None = None, run: Callable[..., Any] | None = None
                   ) -> tuple[list[dict[str, Any]], dict[str, str] | None]:
    """`run_job`, with a pack that raises kept as a failure: (the points it finished, None or `failure_of` its error).

    The same in this process and in a Ray task, so the two backends record a failed pack alike: before, a local pack
    that raised ended the whole sweep with a traceback, while on Ray the other packs went on. A ConfigError still
    raises (a refusal of what the user gave, the same for every pack of its class); so do a stop (SweepStopped) and
    Ctrl-C, which are not Exceptions. `run`: the pack's trainer call (default `run_job`; the runner passes its own
    name for it, which tests replace to stop a sweep at a chosen pack)."""
    done: list[dict[str, Any]] = []

    def keep(item: dict[str, Any]) -> None:
        done.append(item)
        if on_point is not None:
            on_point(item)

    try:
        (run or run_job)(job, on_point=keep, check=check)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 (any error of a pack's training is that pack's failure)
        return done, failure_of(exc)
    return done, None


def pack_reading(job: PackJob, clock: WaitClock) -> dict[str, float | None]:
    """`waiting_threads` (threads that waited for a core, on average) and `other_processes_cores` (cores' worth other
    processes used on this process's cores) since `clock` started, as packs.jsonl records them; both None for a pack
    on a GPU (its host threads only launch kernels, as for the lone rate) or where not measured.

    The wait alone counts every thread of this process, the pack's own lanes and torch's OpenMP threads waiting on
    each other too; the report puts it on other processes only as far as they used this process's cores
    (`stride.metrics.contention.foreign_wait`), as the Trainer's contention note does. Before, packs.jsonl recorded
    the whole wait and the report labelled the speed-up "UNRELIABLE: ... threads waiting for cores other processes
    held" wherever it passed a quarter of a thread."""
    from stride.sweep.sizing import _on_cpu

    if not (job.configs and _on_cpu(job.configs[0])):
        return {"waiting_threads": None, "other_processes_cores": None}
    waiting, other = clock.read()
    return {"waiting_threads": waiting, "other_processes_cores": other}


def ray_job(job: PackJob) -> dict[str, Any]:
    """The Ray task body: the results travel back to the driver, which writes them, with the pack's own wall time
    (from when the task started running: a pack that waited in Ray's queue behind others had that wait counted
    as device time when the driver timed it from submission; audit 10, F10). A pack that raised hands back the points
    it finished and its failure (`run_job_caught`), as the local backend records them: before, the task's exception
    lost the points it had finished, which the local backend kept."""
    t0 = time.perf_counter()
    clock = WaitClock.started()
    try:
        items, failure = run_job_caught(job)
    except ConfigError as exc:  # raised again by the driver, as the local backend raises it
        return {"items": [], "config_error": str(exc), "wall_s": time.perf_counter() - t0}
    return {"items": items, "failure": failure, "wall_s": time.perf_counter() - t0, **pack_reading(job, clock)}
