"""Typed run config: schema, TOML loading with dotted overrides, validation."""

from stride.config.errors import ConfigError
from stride.config.loader import config_hash, config_to_dict, config_to_toml, load_config, set_key
from stride.config.schema import (
    CheckpointConfig,
    DataConfig,
    MetricsConfig,
    ModelConfig,
    OptimConfig,
    ParallelConfig,
    RunConfig,
    TrainConfig,
)

__all__ = [
    "CheckpointConfig", "ConfigError", "DataConfig", "MetricsConfig", "ModelConfig", "OptimConfig",
    "ParallelConfig", "RunConfig", "TrainConfig", "config_hash", "config_to_dict", "config_to_toml",
    "load_config", "set_key",
]
