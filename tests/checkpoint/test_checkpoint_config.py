"""The [checkpoint] section's checks name the key and the allowed values."""

from __future__ import annotations

import copy

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
    diff = config_diff(a, b)
    assert diff.refused == [  # train.steps: whether it continues the run is stride.checkpoint.rerun's to say
        "optim.lr: 0.001 (checkpoint) -> 0.01 (now)",
    ]
    assert diff.allowed == []


def test_layout_and_execution_keys_are_allowed_the_experiment_is_not() -> None:
    a = config_to_dict(load_config())
    b = copy.deepcopy(a)  # edited as a dict: some combinations (comm_hook with dp_shard) do not validate together
    changes = {
        "parallel.dp_shard": 2, "parallel.pp": 2, "parallel.tp": 2, "parallel.pp_schedule": "gpipe",
        "parallel.ddp_bucket_mb": 1.0, "train.grad_accum": 2, "train.activation_checkpointing": "full",
        "optim.impl": "for-loop", "data.prefetch": 0,
        # these change what is trained
        "parallel.mp_param_dtype": "bf16", "parallel.comm_hook": "fp16", "train.batch_size": 32, "train.seed": 1,
        "model.d_model": 32, "data.n_assets": 3, "optim.weight_decay": 0.1, "train.precision": "bf16",
        "train.compile": "model",
    }
    for dotted, value in changes.items():
        sec, key = dotted.split(".")
        b[sec][key] = value
    diff = config_diff(a, b)
    assert [line.split(":")[0] for line in diff.allowed] == [
        "data.prefetch", "optim.impl", "parallel.ddp_bucket_mb", "parallel.dp_shard", "parallel.pp",
        "parallel.pp_schedule", "parallel.tp", "train.activation_checkpointing", "train.grad_accum",
    ]
    assert "parallel.dp_shard: 1 (checkpoint) -> 2 (now)" in diff.allowed
    assert [line.split(":")[0] for line in diff.refused] == [
        "data.n_assets", "model.d_model", "optim.weight_decay", "parallel.comm_hook", "parallel.mp_param_dtype",
        "train.batch_size", "train.compile", "train.precision", "train.seed",
    ]
