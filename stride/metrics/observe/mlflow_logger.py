"""MLflow beside TensorBoard: the run's config as params, every logged record as metrics, summary.json as an artifact.

`metrics.mlflow = true`. The tracking store is `metrics.mlflow_tracking_uri` (a team's server, http://host:5000,
or databricks), or a local file store in `<run dir>/mlflow` (MLflow 3 keeps file stores in maintenance mode
behind MLFLOW_ALLOW_FILE_STORE, which stride sets for that store only; `mlflow ui --backend-store-uri
RUN_DIR/mlflow` with the same variable shows it). What is logged: stride.metrics.observe.tracking. Metrics go
through MLflow's asynchronous logging (a background thread batches them), so a remote server's round trip
does not stall the step; they are flushed at the end. The MLflow run id goes into summary.json
(`mlflow_run_id`). Uses the client library only (the `mlflow` extra installs mlflow-skinny).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from stride.config.loader import config_to_toml
from stride.metrics.observe.tracking import (
    earlier_tracking,
    flat_config,
    flat_metrics,
    logs_here,
    missing,
    remember_tracking,
    report_files,
)
from stride.metrics.run_dir import json_text
from stride.train.callbacks import Callback, TrainerView

PARAMS_PER_CALL = 100  # MLflow's log_batch limit on params
PARAM_CHARS = 6000  # MLflow's limit on a param's value (mlflow.utils.validation.MAX_PARAM_VAL_LENGTH)
TAG_CHARS = 8000  # and on a tag's (MAX_TAG_VAL_LENGTH)
CONFIG_ARTIFACT = "config.toml"  # the whole resolved config, logged where a param had to be shortened
MAX_IN_FLIGHT = 64  # asynchronous metric batches held before the oldest are waited for


def shortened(value: str, limit: int) -> str:
    """`value` within MLflow's `limit` characters. MLflow's client cut a longer param to its first 6000 characters
    with only a log warning (a 7000-character `checkpoint.dir` was logged cut, outside audit 20); here the cut says
    so, and where the whole value is."""
    if len(value) <= limit:
        return value
    note = f"... [cut: {len(value)} characters; the whole value is in the run's {CONFIG_ARTIFACT} artifact]"
    return value[:limit - len(note)] + note


class MLflowCallback(Callback):
    def __init__(self, tracking_uri: str = "", experiment: str = "stride") -> None:
        self.tracking_uri, self.experiment = tracking_uri, experiment
        self.client: Any = None
        self.run_id: str | None = None
        self._pending: list[Any] = []  # the asynchronous log calls not known to be done (RunOperations)

    def on_fit_start(self, trainer: TrainerView) -> None:
        if not logs_here():
            return
        try:
            import mlflow
            from mlflow.entities import Param
        except ImportError:
            raise missing("mlflow", "mlflow") from None
        uri = self.tracking_uri
        if not uri:
            if trainer.run_dir is None:
                raise ValueError("metrics.mlflow needs a run directory (its store is <run dir>/mlflow) or "
                                 "metrics.mlflow_tracking_uri")
            uri = (trainer.run_dir.path / "mlflow").resolve().as_uri()
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = client = mlflow.MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(self.experiment)
        exp_id = exp.experiment_id if exp is not None else client.create_experiment(self.experiment)
        whole = {k: str(v) for k, v in flat_config(trainer.cfg).items()}
        config = {k: shortened(v, PARAM_CHARS) for k, v in whole.items()}
        logged = self._continue(trainer, uri)
        if logged is None:
            tags = {"stride.run_dir": str(trainer.run_dir.path) if trainer.run_dir is not None else ""}
            self.run_id = client.create_run(exp_id, run_name=trainer.cfg.train.name, tags=tags).info.run_id
            logged = {}
        assert self.run_id is not None
        # Params are set once: a continued run keeps them, and a value that changed since (an extension's
        # train.steps) goes into a tag `stride.now.<key>`.
        params = [Param(k, v) for k, v in config.items() if k not in logged]
        for i in range(0, len(params), PARAMS_PER_CALL):
            client.log_batch(self.run_id, params=params[i:i + PARAMS_PER_CALL])
        for k, v in config.items():
            if k in logged and logged[k] != v:
                client.set_tag(self.run_id, f"stride.now.{k}", shortened(whole[k], TAG_CHARS))
        if any(config[k] != whole[k] for k in config):  # a shortened param: the whole values beside it
            client.log_text(self.run_id, config_to_toml(trainer.cfg), CONFIG_ARTIFACT)
        remember_tracking(trainer, "mlflow", {"tracking_uri": uri, "run_id": self.run_id})

    def _continue(self, trainer: TrainerView, uri: str) -> dict[str, str] | None:
        """The params of the MLflow run this run logged to before it stopped (set RUNNING again), or None."""
        earlier = earlier_tracking(trainer, "mlflow")
        if earlier.get("tracking_uri") != uri or not earlier.get("run_id"):
            return None
        try:
            run = self.client.get_run(earlier["run_id"])
        except Exception:  # noqa: BLE001 (deleted, or another store: start a new run)
            return None
        self.run_id = run.info.run_id
        self.client.update_run(self.run_id, status="RUNNING")
        return dict(run.data.params)

    def on_log(self, trainer: TrainerView, rec: Mapping[str, Any]) -> None:
        if self.run_id is None:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, int(rec["step"])) for k, v in flat_metrics(rec).items()]
        self._pending.append(self.client.log_batch(self.run_id, metrics=metrics, synchronous=False))
        if len(self._pending) > MAX_IN_FLIGHT:  # the oldest are long done (else: back-pressure on a slow server)
            old, self._pending = self._pending[:-MAX_IN_FLIGHT // 2], self._pending[-MAX_IN_FLIGHT // 2:]
            for op in old:
                op.wait()

    def _flush(self) -> None:
        """Wait for the metrics in flight (an error in one is raised here)."""
        pending, self._pending = self._pending, []
        for op in pending:
            op.wait()

    def on_fit_end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        if self.run_id is None:
            return
        summary["mlflow_run_id"] = self.run_id
        self._flush()
        self.client.log_text(self.run_id, json_text(summary), "summary.json")
        for path in report_files(trainer.run_dir.path if trainer.run_dir is not None else None):
            self.client.log_artifact(self.run_id, str(path))
        self.client.set_terminated(self.run_id, "FINISHED")

    def on_fit_abort(self, trainer: TrainerView, exc: BaseException) -> None:
        if self.run_id is None:
            return
        self._flush()
        stopped = isinstance(exc, SystemExit | KeyboardInterrupt)  # a preemption stop, Ctrl-C: resumable
        self.client.set_terminated(self.run_id, "KILLED" if stopped else "FAILED")
