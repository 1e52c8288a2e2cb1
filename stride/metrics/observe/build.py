"""`build_observers(cfg)`: the observer callbacks `[metrics]` asks for, in a fixed order."""

from __future__ import annotations

import importlib.util

from stride.config.errors import ConfigError
from stride.config.schema import RunConfig
from stride.metrics.observe.system import SystemCallback
from stride.train.callbacks import Callback

# [metrics] switch -> (the module it imports, its package on PyPI, the stride extra that installs it)
OPTIONAL = {"tensorboard": ("tensorboard", "tensorboard", "observe"),
            "prometheus": ("prometheus_client", "prometheus-client", "observe"),
            "mlflow": ("mlflow", "mlflow", "mlflow"), "wandb": ("wandb", "wandb", "wandb")}


def check_observer_packages(cfg: RunConfig) -> None:
    """A switched-on observer whose client library is not installed: one ConfigError (exit status 2) naming the key
    and the install command, before the model, the data or the run folder is made. It used to be a traceback from
    the observer's import once training began (outside audit 12); find_spec imports nothing."""
    m = cfg.metrics
    for key, (module, package, extra) in OPTIONAL.items():
        if getattr(m, key) and importlib.util.find_spec(module) is None:
            raise ConfigError(f"`metrics.{key}` = true needs the {package} package, which is not installed: "
                              f"pip install -e '.[{extra}]' in the stride clone (or pip install {package}), or set "
                              f"metrics.{key} = false")


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
