"""A training loss that goes NaN or inf ends the run, unless checkpointing's step guard is there to recover.

Without checkpointing nothing can undo the step: its update makes the weights NaN, and every later step
trains nothing while the run looks healthy (it used to finish with exit 0 and a `NaN` in summary.json).
So the trainer stops at the first logged step that finds a non-finite loss: summary.json is written
with `status = "diverged"`, `diverged_at_step` (the first step whose loss, averaged over ranks, was not
finite) and the last step's `final_train_loss` (null where not finite, named in `nonfinite_fields`), and
fit() raises `TrainingDiverged` (`stride train`: one line on stderr, exit status 1).

No host sync per step: each step's loss (a 0-d tensor already on the device) is kept until the next
logged step, where the trainer reads them all in the one collective and sync the log line pays anyway;
the first non-finite step is found exactly, up to `metrics.log_every` steps after it happened.

With `[checkpoint] enabled` the step guard (stride.checkpoint.guard) reads every step's loss: a
non-finite step is skipped (no update), `nan_rollback_after` of them in a row roll back to the last
checkpoint, and when that cannot help (no checkpoint yet, `max_rollbacks` spent) the run fails with
a checkpoint error naming the step (exit status 1). The watch here stays off then (a callback with
`guards_nonfinite = True` takes that job).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from stride.errors import StrideError
from stride.parallel.context import Parallel


class TrainingDiverged(StrideError):
    """The training loss went non-finite with nothing to recover it; `summary` is what summary.json holds."""

    def __init__(self, message: str, step: int, summary: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.step = step
        self.summary = summary or {}


class LossWatch:
    """Each step's loss tensor until the next read; `active` False (a step guard is on): only the newest is kept."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self.pending: list[tuple[int, torch.Tensor]] = []

    def add(self, step: int, loss: torch.Tensor) -> None:
        if not self.active:
            self.pending.clear()
        self.pending.append((step, loss))

    def read(self, par: Parallel) -> tuple[float, int | None]:
        """(the newest step's loss, mean over ranks; the first step since the last read whose loss was not finite).

        Every rank calls it at the same steps (a collective); the verdict is the same on every rank."""
        steps = [s for s, _ in self.pending]
        # one stack, then one detach and cast: not a detach and a cast per step (20 tensor ops a logged step
        # at log_every 10, ~30 us there after the step's work evicted torch's code; the loss tensors are
        # the steps' detached 0-d losses, of one dtype)
        losses = par.mean(torch.stack([v for _, v in self.pending]).detach().float()).tolist()
        self.pending.clear()
        bad = next((s for s, v in zip(steps, losses, strict=True) if not math.isfinite(v)), None)
        return losses[-1], bad if self.active else None


def diverged(summary: dict[str, Any], first_bad: int, run_dir: Any) -> TrainingDiverged:
    """Mark `summary` diverged at `first_bad`; the error that ends the run, naming the step and what to try."""
    summary["status"] = "diverged"
    summary["diverged_at_step"] = first_bad
    where = f"; {run_dir}/summary.json marks it diverged" if run_dir is not None else ""
    return TrainingDiverged(
        f"training diverged: the loss was not finite at step {first_bad} (seen at logged step {summary['steps']}, "
        f"where the run stopped){where}. Lower optim.lr, set train.grad_clip, or enable [checkpoint] (it skips "
        "non-finite steps and rolls back)", first_bad, summary)
