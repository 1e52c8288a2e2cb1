"""Observers beside metrics.jsonl: TensorBoard scalars, a Prometheus endpoint, CPU/RSS and NVML sampling.

Each is a trainer `Callback`; `build_observers(cfg)` picks them from `[metrics]`. Heavy imports
(tensorboard, prometheus_client, pynvml) happen only when an observer is switched on.
"""

from stride.metrics.observe.build import build_observers

__all__ = ["build_observers"]
