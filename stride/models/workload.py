"""What a model family's `workload.py` builds on: the builder signature and the size-table lookup.

A family keeps its size table and its builders beside its model (e.g. `transformer/workload.py`);
`registry.py` names each workload in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from stride.config.errors import ConfigError, suggest
from stride.config.schema import ModelConfig

# (model config, features per timestep, timesteps per window, horizons) -> a single-device model
Builder = Callable[[ModelConfig, int, int, int], nn.Module]


def sized(sizes: dict[str, dict[str, Any]], cfg: ModelConfig, workload: str) -> dict[str, Any]:
    """A copy of the row `model.size` of a family's size table, or a ConfigError listing the sizes."""
    if cfg.size not in sizes:
        raise ConfigError(
            f"`model.size` = {cfg.size!r} is not a size of {workload}{suggest(cfg.size, list(sizes))}; "
            f"sizes are {', '.join(sizes)}"
        )
    return dict(sizes[cfg.size])


def n_quantiles(cfg: ModelConfig) -> int:
    """Outputs per horizon beyond one: the quantile levels under `loss = "quantile"`, else 0."""
    return len(cfg.quantiles) if cfg.loss == "quantile" else 0
