"""`build_observers(cfg)`: the observer callbacks `[metrics]` asks for, in a fixed order."""

from __future__ import annotations

from stride.config.schema import RunConfig
from stride.metrics.observe.system import SystemCallback
from stride.train.callbacks import Callback


def build_observers(cfg: RunConfig) -> list[Callback]:
    """System sampling first (the others read its latest sample), then TensorBoard, Prometheus, MLflow, W&B.

    All but the sampler are imported only when switched on: their client libraries are optional (the
    `observe`, `mlflow` and `wandb` extras) and heavy."""
    m = cfg.metrics
    out: list[Callback] = []
    system = SystemCallback(m.system_sample_s) if m.system_sample_s > 0 else None
    if system is not None:
        out.append(system)
    if m.tensorboard:
        from stride.metrics.observe.tensorboard import TensorBoardCallback

        out.append(TensorBoardCallback(system=system))
    if m.prometheus:
        from stride.metrics.observe.prometheus import PrometheusCallback

        out.append(PrometheusCallback(m.prometheus_host, m.prometheus_port, system=system))
    if m.mlflow:  # the trackers last: the summary they log holds what the others added
        from stride.metrics.observe.mlflow_logger import MLflowCallback

        out.append(MLflowCallback(m.mlflow_tracking_uri, m.mlflow_experiment))
    if m.wandb:
        from stride.metrics.observe.wandb_logger import WandbCallback

        out.append(WandbCallback(m.wandb_mode, m.wandb_project, m.wandb_name))
    return out
