"""The callbacks a run gets: the caller's, then what the config asks for and the caller did not give.

The one place that assembles them (the trainer calls it with the callbacks it was given): a
checkpoint callback when `[checkpoint] enabled`, then the observers `[metrics]` switches on. A
callback the caller passed of one of those kinds takes that kind's place, so a caller controls
the order (e.g. a probe after the Prometheus observer) by passing both.
"""

from __future__ import annotations

from collections.abc import Iterable

from stride.checkpoint import CheckpointCallback
from stride.config.schema import RunConfig
from stride.metrics.observe import build_observers
from stride.train.callbacks import Callback


def callbacks_for(cfg: RunConfig, given: Iterable[Callback] = ()) -> tuple[Callback, ...]:
    out = list(given)
    if cfg.checkpoint.enabled and not any(isinstance(cb, CheckpointCallback) for cb in out):
        out.append(CheckpointCallback())
    have = {type(cb) for cb in out}
    out += [cb for cb in build_observers(cfg) if type(cb) not in have]
    return tuple(out)
