"""Errors the checkpoint layer raises: each names the checkpoint, the step and what to do."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A save or load that could not be done; the message says where and why."""


class ConfigMismatchError(CheckpointError):
    """The checkpoint was written by a run with another config (the message holds the diff)."""
