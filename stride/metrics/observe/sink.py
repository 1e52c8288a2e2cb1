"""The base of the sinks (TensorBoard, Prometheus, MLflow, W&B): copies of the run elsewhere, never its record.

The run's own files (metrics.jsonl, summary.json, checkpoints) are what a run is; a sink only copies them. So a
sink that fails once training has begun (a full disk under its folder, a tracking server gone, an unwritable
event file) costs that sink alone: one warning line naming the sink, where it writes and why
(`stride train: warning: TensorBoard (RUN/tensorboard): the disk is full; ...`), the sink logs nothing more in
that run, training goes on, summary.json is written as usual and records the failure under `sink_failures`
({sink: reason}), and the exit status stays 0 (the run trained and its files are complete). Before (outside
audit of the sinks) a full disk under MLflow's store at the end lost summary.json, and TensorBoard's writer thread
stopped training with a traceback. A sink that cannot start (an unreachable tracking URI, an unwritable folder,
a port in use) refuses the run before its first step instead: nothing has trained yet.

Subclasses implement `_log`, `_step_end`, `_end`, `_close` (and `where`); the hooks here call them guarded.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from typing import Any

from stride.errors import StrideError, describe_os_error, one_line
from stride.train.callbacks import Callback, TrainerView


class SinkFailedWarning(UserWarning):
    """A sink failed during the run; the run went on without it (its own files are complete)."""


class SinkUnwritable(StrideError):
    """A sink's folder cannot be written: the machine's state (a permission, a read-only file system), exit 1."""

    exit_code = 1


def reason_of(exc: BaseException, path: object = None) -> str:
    """One line saying what went wrong: an OSError names its path as text (not tensorboard's b'...' bytes)."""
    if isinstance(exc, OSError):
        if isinstance(exc.filename, bytes):
            exc.filename = exc.filename.decode(errors="replace")
        return one_line(describe_os_error(exc, path if exc.filename is None else None))
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return one_line(f"{type(exc).__name__}: {first}" if first else type(exc).__name__)


class Sink(Callback):
    name = "sink"  # how the warning names it

    failed: str | None = None  # why this sink stopped logging (None: it works)

    def where(self) -> str:
        """Where the sink writes (a folder, a URI, an address), for the warning."""
        return ""

    def _log(self, trainer: TrainerView, rec: Mapping[str, Any]) -> None: ...

    def _step_end(self, trainer: TrainerView) -> None: ...

    def _rollback(self, trainer: TrainerView, from_step: int) -> None: ...

    def _end(self, trainer: TrainerView, summary: dict[str, Any]) -> None: ...

    def _close(self, trainer: TrainerView, exc: BaseException | None) -> None:
        """Let go of what the sink holds (after a failure, or when fit() ends early)."""

    def _fail(self, trainer: TrainerView, exc: Exception) -> None:
        where = self.where()
        self.failed = reason_of(exc, where or None)
        warnings.warn(SinkFailedWarning(
            f"{self.name}{f' ({where})' if where else ''}: {self.failed}; it logs nothing more for this run (the run "
            "goes on; its own files, metrics.jsonl and summary.json, are complete; summary.json's sink_failures "
            "names it)"), stacklevel=3)
        with contextlib.suppress(Exception):  # it failed already: the warning said why
            self._close(trainer, exc)

    def on_log(self, trainer: TrainerView, record: Mapping[str, Any]) -> None:
        if self.failed is None:
            try:
                self._log(trainer, record)
            except Exception as exc:  # noqa: BLE001 (a sink's failure is that sink's alone: module docstring)
                self._fail(trainer, exc)

    def on_step_end(self, trainer: TrainerView) -> None:
        if self.failed is None:
            try:
                self._step_end(trainer)
            except Exception as exc:  # noqa: BLE001
                self._fail(trainer, exc)

    def on_rollback(self, trainer: TrainerView, from_step: int) -> None:
        if self.failed is None:
            try:
                self._rollback(trainer, from_step)
            except Exception as exc:  # noqa: BLE001
                self._fail(trainer, exc)

    def on_fit_end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        if self.failed is None:
            try:
                self._end(trainer, summary)
            except Exception as exc:  # noqa: BLE001
                self._fail(trainer, exc)
        if self.failed is not None:
            summary.setdefault("sink_failures", {})[self.name] = self.failed

    def on_fit_abort(self, trainer: TrainerView, exc: BaseException) -> None:
        if self.failed is None:
            self._close(trainer, exc)
