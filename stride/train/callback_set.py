"""The callbacks a run gets: the caller's, then what the config asks for and the caller did not give.

The one place that assembles them (the trainer calls it with the callbacks it was given): a
checkpoint callback when `[checkpoint] enabled`, then the observers `[metrics]` switches on. A
callback the caller passed of one of those kinds takes that kind's place, so a caller controls
the order (e.g. a probe after the Prometheus observer) by passing both.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable

from stride.config.schema import RunConfig
from stride.metrics.observe import build_observers
from stride.train.callbacks import Callback, TrainerView


def callbacks_for(cfg: RunConfig, given: Iterable[Callback] = ()) -> tuple[Callback, ...]:
    out = list(given)
    if cfg.checkpoint.enabled:  # imported here: stride.checkpoint imports DCP, and DCP DTensor (0.4 s, see
        # stride.parallel.lazy_types), which a run without checkpoints need not pay
        from stride.checkpoint import CheckpointCallback

        if not any(isinstance(cb, CheckpointCallback) for cb in out):
            out.append(CheckpointCallback())
    have = {type(cb) for cb in out}
    out += [cb for cb in build_observers(cfg) if type(cb) not in have]
    return tuple(out)


def abort_callbacks(trainer: TrainerView, started: Iterable[Callback], exc: BaseException) -> None:
    """fit() ended early: each started callback lets go of what it took, newest first. A callback that fails
    here is reported and skipped: the error that ended fit() is the one the caller sees."""
    for cb in reversed(list(started)):
        try:
            cb.on_fit_abort(trainer, exc)
        except Exception as err:  # noqa: BLE001 (a clean-up must not hide the cause)
            with contextlib.suppress(Exception):
                print(f"stride: {type(cb).__name__}.on_fit_abort failed: {type(err).__name__}: {err}", file=sys.stderr)
