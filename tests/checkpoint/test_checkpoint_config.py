"""The [checkpoint] section's checks name the key and the allowed values."""

from __future__ import annotations

import pytest

from stride.checkpoint.config_diff import config_diff
from stride.config import ConfigError, config_to_dict, load_config


@pytest.mark.parametrize(("override", "message"), [
    ("checkpoint.spike_action=halt", "`checkpoint.spike_action` = 'halt' is not one of log, skip, rollback"),
    ("checkpoint.resume=maybe", "`checkpoint.resume` = 'maybe' is not one of auto, never"),
    ("checkpoint.keep_last=0", "`checkpoint.keep_last` = 0 must be > 0"),
    ("checkpoint.spike_threshold=0.5", "`checkpoint.spike_threshold` = 0.5 must be > 1"),
    ("checkpoint.nan_rollback_after=-1", "`checkpoint.nan_rollback_after` = -1 must be >= 0"),
])
def test_bad_checkpoint_values_are_named(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(overrides=[override])
    assert message in str(err.value)


def test_rollback_on_spike_needs_checkpoints() -> None:
    with pytest.raises(ConfigError, match="needs checkpoints"):
        load_config(overrides=["checkpoint.spike_threshold=3", "checkpoint.spike_action=rollback"])


def test_config_diff_lists_training_settings_only() -> None:
    a = config_to_dict(load_config())
    b = config_to_dict(load_config(overrides=["optim.lr=0.01", "train.steps=7", "metrics.log_every=3",
                                              "checkpoint.every=5", "train.name=other"]))
    assert config_diff(a, b) == [
        "optim.lr: 0.001 (checkpoint) -> 0.01 (now)",
        "train.steps: 200 (checkpoint) -> 7 (now)",
    ]
