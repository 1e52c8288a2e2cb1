"""Errors the checkpoint layer raises: each names the checkpoint, the step and what to do."""

from __future__ import annotations

from stride.config.errors import ConfigError


class CheckpointError(RuntimeError):
    """A save or load that could not be done; the message says where and why."""


class ConfigMismatchError(CheckpointError, ConfigError):
    """The checkpoint was written by a run with another config (the message holds the diff).

    Also a ConfigError, so `stride train` reports it as one (a message and exit status 2, no traceback).
    """


class LastCheckpointUnusableError(ConfigMismatchError):
    """A finished run cannot be extended exactly: the checkpoint of its last step was skipped (corrupted or
    incomplete). Nothing in the config is wrong, so the CLI calls it a checkpoint error; it is still a refusal
    (exit status 2, nothing trained, no file changed), as every other `train.steps` refusal (audit 21, L4)."""

    label = "checkpoint error"


class ModelMismatchError(ConfigMismatchError):
    """The checkpoint's model entries are not the built model's: entries it holds that the model lacks (DCP loads
    what the model asks for and would drop them without a word), or entries the model has that it lacks. No older
    checkpoint of the folder is tried (they hold the same model): a refusal, exit status 2. `saved`: the checkpoint's
    model entry names (without "model."), for a hint about the config that shaped it."""

    def __init__(self, message: str, saved: list[str]) -> None:
        super().__init__(message)
        self.saved = saved


class CheckpointLoadError(CheckpointError):
    """A checkpoint that verified could not be loaded (on every rank alike); resume falls back past it."""


class StoreChangedError(CheckpointError):
    """A data store file the run maps was changed in place during the run: no checkpoint is saved of its batches."""


class SaveVetoed(CheckpointError):
    """A save refused before anything was written: `views`, each rank's notes (the pre-save check)."""

    def __init__(self, step: int, views: list[list[str]]) -> None:
        super().__init__(f"not saving step {step}: " + "; ".join(n for v in views for n in v))
        self.step, self.views = step, views
