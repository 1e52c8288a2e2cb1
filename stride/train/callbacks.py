"""What a callback is, and what of the trainer it may see: the one module of `stride.train` that
checkpointing (`stride.checkpoint`) and the observers (`stride.metrics.observe`) import.

A leaf: it imports nothing of stride at run time (the types below are for checkers only), so the
packages that plug into the trainer do not depend on the trainer, and the trainer can assemble them
without a cycle (import-linter keeps it so: pyproject.toml, `[tool.importlinter]`).

Callbacks read the trainer through `TrainerView` and change it only through the methods listed
there: the trainer's own state (`load_state_dict`) and its data position (`resume_data`). The
model's and the optimizer's tensors are live; loading a checkpoint writes into them in place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
    from torch import nn

    from stride.config.schema import RunConfig
    from stride.metrics.run_dir import RunDir
    from stride.metrics.step_timer import StepTimer


class TrainerView(Protocol):
    """The trainer as a callback sees it (stride.train.trainer.Trainer implements it)."""

    @property
    def cfg(self) -> RunConfig: ...  # the resolved config (read it, never change it)

    @property
    def step(self) -> int: ...  # optimizer steps taken (a resumed run counts from its checkpoint)

    @property
    def device(self) -> torch.device: ...

    @property
    def model(self) -> nn.Module: ...  # the raw module (not the DDP wrapper); a pipeline rank's own stages

    @property
    def optimizer(self) -> torch.optim.Optimizer: ...

    @property
    def pipelined(self) -> bool: ...  # pipeline parallelism: each rank holds some of the model

    @property
    def loss_scaled(self) -> bool: ...  # fp16: a GradScaler skips steps with inf/NaN gradients itself

    @property
    def run_dir(self) -> RunDir | None: ...  # rank 0's run directory (None on other ranks or when off)

    @property
    def history(self) -> Sequence[dict[str, Any]]: ...  # every record logged so far (metrics.jsonl lines)

    @property
    def timer(self) -> StepTimer: ...  # a callback books its own pauses here (`mark`, `add`)

    @property
    def step_samples(self) -> Sequence[int]: ...  # samples each step of this process trained, over data-parallel ranks

    def state_dict(self) -> dict[str, Any]:
        """The trainer's own state: step, skipped steps, LR schedule, loss scaler (JSON-able)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    def data_changed_in_place(self) -> list[str] | None:
        """The files of the config's data store (and caches derived from it) written in place since this trainer
        mapped them, in words: batches read since come from other bytes (stride.data.mapped_files). None: the data
        came from the caller, not checked."""
        ...

    def data_position(self) -> dict[str, Any]:
        """Where the training data stands (the loader's state, or batches to replay), JSON-able."""
        ...

    def resume_data(self, position: Mapping[str, Any]) -> None:
        """Continue the training data from `position` (as `data_position` gave it) at the next step."""
        ...

    def keep_rollback_point(self) -> None:
        """The loop's tallies at this step (a checkpoint of it was just taken): a rollback to it restores them."""
        ...

    def summary_keys_to_come(self) -> dict[str, Any]:
        """What the run's callbacks will add to summary.json at their on_fit_end, as it stands now
        (`Callback.summary_keys` of each)."""
        ...

    def rolled_back(self, from_step: int, event: Mapping[str, Any]) -> None:
        """A checkpoint was loaded in the loop at `from_step` (`step` is now its step): the steps after it are
        trained again, so their records and timings go (rank 0 moves the records to rollbacks.jsonl with `event`),
        and every callback's `on_rollback` is called."""
        ...


class Callback:
    """Hooks into `Trainer.fit()`, in the order the trainer holds its callbacks. Override what you need."""

    # True: this callback deals with non-finite losses itself (skips the update, rolls back), so the trainer
    # does not stop the run at the first one (stride.train.divergence); the checkpoint callback is one.
    guards_nonfinite = False

    def on_fit_start(self, trainer: TrainerView) -> None:
        """After set-up (model, optimizer, first batch), before the first step: load a checkpoint here."""

    def before_optimizer_step(self, trainer: TrainerView, loss: torch.Tensor, grad_norm: torch.Tensor | None) -> bool:
        """After backward (and clipping), before the update: False skips this step's update.

        The trainer asks every callback that overrides this, each step, even after one said False
        (a callback may take part in a collective vote that every rank must reach)."""
        return True

    def on_log(self, trainer: TrainerView, record: Mapping[str, Any]) -> None:
        """A record the trainer logged (a metrics.jsonl line: training step or validation)."""

    def on_step_end(self, trainer: TrainerView) -> None:
        """After each optimizer step, its logging and validation."""

    def on_rollback(self, trainer: TrainerView, from_step: int) -> None:
        """A rollback in the loop (the checkpoint callback's step guard) took the run from `from_step` back to
        `trainer.step`: the steps after it are trained and logged again. The records logged past it are gone from
        `trainer.history` and metrics.jsonl; a callback that copied them elsewhere hides or marks them here."""

    def on_fit_end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        """After the last step; may add keys to `summary` (summary.json) before it is written."""

    def summary_keys(self, trainer: TrainerView) -> dict[str, Any]:
        """The keys this callback's on_fit_end adds to summary.json, as they stand now (after the last step, before
        its on_fit_end). The final checkpoint records them with the summary: a process stopped between that save and
        summary.json's write leaves them for the rerun that writes summary.json (stride.checkpoint.rerun); before,
        the recovered summary lacked `system` and the sinks' run ids."""
        return {}

    def on_fit_abort(self, trainer: TrainerView, exc: BaseException) -> None:
        """fit() ended without on_fit_end (an exception, a preemption stop, or a run found finished), after this
        callback's on_fit_start: let go of what it took (threads, files, locks, a tracking run)."""


def overrides(cb: Callback, hook: str) -> bool:
    """Whether `cb`'s class replaces `Callback.<hook>` (the trainer calls per-step hooks only on those)."""
    return getattr(type(cb), hook) is not getattr(Callback, hook)

