"""TensorBoard scalars beside metrics.jsonl: loss, lr, throughput, step-time breakdown, memory, MFU.

Writes every record the trainer logs (`on_log`: TensorBoard and metrics.jsonl agree step for step) to
`<run dir>/tensorboard`, plus the run's summary figures (MFU, peak memory) at the last step.

The event file is written here, in the training thread, not through torch's SummaryWriter: its writer thread
turned a full disk into a thread traceback that stopped training, and an unwritable folder into a message naming
the file as a bytes literal (outside audit of the sinks). A failure now is one warning naming the file
(stride.metrics.observe.sink). The file is opened at the first record, so a run refused while starting (a resume
refused by a later callback, a Prometheus port in use) leaves no empty events file; the folder is checked
writable before the first step. Each session's file starts with TensorBoard's purge marker at the step after
the one it starts from: a run resumed from its checkpoint at step 20 after a kill at step 25 shows steps 21-25
once (the redone ones), as metrics.jsonl does; the killed process's values at those steps are hidden by
TensorBoard's readers (EventAccumulator, the TensorBoard UI), though they stay in the older file. A rollback in
the loop (the step guard's, back to the checkpoint at step 6 from step 9) writes the same marker at step 7 into
the open file: the rolled-back values of steps 7-9 are hidden and the redone ones shown, as in metrics.jsonl.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import torch

from stride.errors import one_line
from stride.metrics.observe.sink import Sink, SinkUnwritable
from stride.metrics.observe.system import SystemCallback
from stride.train.callbacks import TrainerView

# summary.json key -> TensorBoard tag, written once at the end of the run.
SUMMARY_TAGS = {
    "mfu": "perf/mfu",
    "achieved_flops_per_s": "perf/achieved_flops_per_s",
    "samples_per_s": "perf/samples_per_s_mean",
    "step_time_s": "perf/step_time_s_mean",
    "peak_mem_bytes": "memory/peak_bytes",
    "saved_activation_bytes": "memory/saved_activation_bytes",
}


def unwritable(folder: Path) -> str | None:
    """Why `folder` (made if missing) cannot hold new files, or None; nothing is created to find out."""
    p = folder
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        return f"{p} is not a directory"
    if not os.access(p, os.W_OK | os.X_OK):  # access(2) also says EROFS for a read-only file system
        return "read-only file system" if _read_only(p) else "permission denied"
    return None


def _read_only(p: Path) -> bool:
    try:
        return bool(os.statvfs(p).f_flag & os.ST_RDONLY)
    except OSError:
        return False


_FILE_NUMBERS = itertools.count()  # two files of one process in one second get two names


class EventFile:
    """One TensorBoard event file, written synchronously (TFRecord framing, tensorboard's own protos)."""

    def __init__(self, folder: Path, purge_step: int) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.summary.writer.record_writer import RecordWriter

        folder.mkdir(parents=True, exist_ok=True)
        name = f"{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILE_NUMBERS)}"
        self.path = folder / f"events.out.tfevents.{name}"
        self._file: BinaryIO = open(self.path, "wb")  # noqa: SIM115 (held open for the run; closed in close())
        self._records = RecordWriter(self._file)
        self._event = Event
        self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))
        self.purge(purge_step)

    def purge(self, step: int) -> None:
        """TensorBoard's readers drop every value written before this at steps >= `step` (torch's SummaryWriter
        purge_step: a session START marker, which they honour anywhere in a file)."""
        from tensorboard.compat.proto.event_pb2 import SessionLog

        self._write(self._event(wall_time=time.time(), step=step, session_log=SessionLog(status=SessionLog.START)))
        self.flush()

    def _write(self, event: Any) -> None:
        self._records.write(event.SerializeToString())

    def scalar(self, tag: str, value: float, step: int) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._write(self._event(wall_time=time.time(), step=int(step),
                                summary=Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        try:
            self._file.flush()
        finally:
            self._file.close()


class TensorBoardCallback(Sink):
    name = "TensorBoard"

    def __init__(self, log_dir: str | Path | None = None, system: SystemCallback | None = None) -> None:
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.system = system
        self.writer: EventFile | None = None
        self._start_step = 0
        self._logged = False  # a record was written this step: memory and system scalars go beside it

    def where(self) -> str:
        return str(self.writer.path if self.writer is not None else self.log_dir)

    def on_fit_start(self, trainer: TrainerView) -> None:
        log_dir = self.log_dir
        if log_dir is None:
            if trainer.run_dir is None:
                raise ValueError("metrics.tensorboard needs a run directory (Trainer(write_run_dir=True)) or a log_dir")
            log_dir = trainer.run_dir.path / "tensorboard"
        self.log_dir = log_dir
        why = unwritable(log_dir)
        if why is not None:
            raise SinkUnwritable(f"metrics.tensorboard: cannot write TensorBoard's folder {one_line(str(log_dir))}: "
                                 f"{why} (set metrics.tensorboard = false, or make it writable)")
        self._start_step = trainer.step  # a resumed run: the killed segment's values after it are purged

    def _open(self) -> EventFile:
        if self.writer is None:
            assert self.log_dir is not None
            self.writer = EventFile(self.log_dir, self._start_step + 1)
        return self.writer

    def _log(self, trainer: TrainerView, rec: Mapping[str, Any]) -> None:
        self._logged = True
        step, w = rec["step"], self._open()
        for key, tag in (("loss", "train/loss"), ("val_loss", "val/loss"), ("lr", "train/lr"),
                         ("samples_per_s", "perf/samples_per_s"), ("step_time_s", "perf/step_time_s")):
            if rec.get(key) is not None:
                w.scalar(tag, rec[key], step)
        for phase, sec in (rec.get("breakdown_s") or {}).items():
            w.scalar(f"breakdown/{phase}_s", sec, step)
        w.flush()

    def _step_end(self, trainer: TrainerView) -> None:
        if not self._logged:
            return
        self._logged = False
        step, w = trainer.step, self._open()
        if trainer.device.type == "cuda":
            w.scalar("memory/cuda_allocated_bytes", torch.cuda.memory_allocated(trainer.device), step)
            w.scalar("memory/cuda_reserved_bytes", torch.cuda.memory_reserved(trainer.device), step)
        latest = self.system.sampler.latest if self.system is not None and self.system.sampler is not None else None
        if latest is not None:
            w.scalar("system/rss_bytes", latest["rss_bytes"], step)
            w.scalar("system/cpu_percent", latest["cpu_percent"], step)
            for g in latest.get("gpus", []):
                for key in ("util_percent", "mem_used_bytes", "power_w", "temperature_c", "sm_clock_mhz"):
                    if g.get(key) is not None:
                        w.scalar(f"gpu{g['index']}/{key}", g[key], step)
        w.flush()

    def _rollback(self, trainer: TrainerView, from_step: int) -> None:
        """The steps after `trainer.step` are trained again: their values so far are hidden from here on."""
        self._logged = False  # the step's memory and system scalars belonged to the rolled-back step
        self._open().purge(trainer.step + 1)

    def _end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        w = self._open()
        for key, tag in SUMMARY_TAGS.items():
            if summary.get(key) is not None:
                w.scalar(tag, summary[key], trainer.step)
        self.writer = None
        w.close()
        summary["tensorboard_dir"] = str(self.log_dir)

    def summary_keys(self, trainer: TrainerView) -> dict[str, Any]:
        return {"tensorboard_dir": str(self.log_dir)} if self.failed is None and self.log_dir is not None else {}

    def _close(self, trainer: TrainerView, exc: BaseException | None) -> None:
        w, self.writer = self.writer, None
        if w is not None:  # what was logged up to the failure stays readable
            w.close()
