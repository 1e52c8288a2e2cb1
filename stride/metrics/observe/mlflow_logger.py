"""MLflow beside TensorBoard: the run's config as params, every logged record as metrics, summary.json as an artifact.

`metrics.mlflow = true`. The tracking store is `metrics.mlflow_tracking_uri` (a team's server, http://host:5000,
or databricks), or a local file store in `<run dir>/mlflow` (MLflow 3 keeps file stores in maintenance mode
behind MLFLOW_ALLOW_FILE_STORE, which stride sets for that store only; `mlflow ui --backend-store-uri
RUN_DIR/mlflow` with the same variable shows it). What is logged: stride.metrics.observe.tracking. Metrics go
through MLflow's asynchronous logging (a background thread batches them), so a remote server's round trip
does not stall the step; they are flushed at the end. The MLflow run id goes into summary.json
(`mlflow_run_id`). Uses the client library only (the `mlflow` extra installs mlflow-skinny).

A server URI (http, https) is probed before training with a 5 s connection timeout: one that does not answer
is refused in one line naming it (exit status 2); before, MLflow's client retried for about 4 minutes and ended
in a 123-line traceback (outside audit of the sinks). A failure once training has begun (the store's disk full,
the server gone) is the sink's alone (stride.metrics.observe.sink): one warning, summary.json is written; the
MLflow run is then left as it was (no further call to a store that fails).

A run resumed from a checkpoint logs again the steps after that checkpoint that the stopped process had logged
(MLflow's API cannot delete metric values): each such step's history holds both values, the redone one with
the later timestamp. The run's tag `stride.resumed_at` lists the steps it was resumed at ("20" or "20,40"), so a
reader can tell: at a step after a resume step, take the value logged last. TensorBoard hides the stopped
process's values itself (stride.metrics.observe.tensorboard); metrics.jsonl holds the redone ones only.
A rollback in the loop (the step guard's) is the same for MLflow: the steps it trains again hold both values,
the redone one last, and the tag `stride.rolled_back` lists the rollbacks as `from>to` ("9>6" or "9>6,15>12");
metrics.jsonl holds the redone values only, rollbacks.jsonl the rolled-back ones.
"""

from __future__ import annotations

import os
import socket
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

from stride.config.errors import ConfigError
from stride.config.loader import config_to_toml
from stride.errors import one_line
from stride.metrics.observe.sink import Sink
from stride.metrics.observe.tracking import (
    earlier_tracking,
    flat_config,
    logs_here,
    missing,
    remember_tracking,
    report_files,
    tracked_metrics,
)
from stride.metrics.run_dir import json_text
from stride.train.callbacks import TrainerView

PARAMS_PER_CALL = 100  # MLflow's log_batch limit on params
PARAM_CHARS = 6000  # MLflow's limit on a param's value (mlflow.utils.validation.MAX_PARAM_VAL_LENGTH)
TAG_CHARS = 8000  # and on a tag's (MAX_TAG_VAL_LENGTH)
CONFIG_ARTIFACT = "config.toml"  # the whole resolved config, logged where a param had to be shortened
MAX_IN_FLIGHT = 64  # asynchronous metric batches held before the oldest are waited for
PROBE_S = 5.0  # how long a tracking server has to accept a connection before the run is refused
RESUMED_TAG = "stride.resumed_at"
ROLLED_BACK_TAG = "stride.rolled_back"


def shown_uri(uri: str) -> str:
    """`uri` for a message: a password in it replaced by ***."""
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None:
        return one_line(uri)
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return one_line(urllib.parse.urlunsplit(parts._replace(netloc=netloc)))


def refused(uri: str, why: str) -> ConfigError:
    return ConfigError(f"`metrics.mlflow_tracking_uri` = {shown_uri(uri)!r}: {why} (start the server, fix the URI, "
                       "or set metrics.mlflow = false)")


def probe(uri: str, timeout: float = PROBE_S) -> None:
    """Refuse an http(s) tracking URI whose server does not accept a connection within `timeout` seconds."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise refused(uri, f"not a valid address: {exc}") from None
    if not parts.hostname:
        raise refused(uri, "it names no host")
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except TimeoutError:
        raise refused(uri, f"the tracking server did not answer within {timeout:g} s") from None
    except OSError as exc:
        raise refused(uri, f"the tracking server cannot be reached: {exc.strerror or exc}") from None


def shortened(value: str, limit: int) -> str:
    """`value` within MLflow's `limit` characters. MLflow's client cut a longer param to its first 6000 characters
    with only a log warning (a 7000-character `checkpoint.dir` was logged cut, outside audit 20); here the cut says
    so, and where the whole value is."""
    if len(value) <= limit:
        return value
    note = f"... [cut: {len(value)} characters; the whole value is in the run's {CONFIG_ARTIFACT} artifact]"
    return value[:limit - len(note)] + note


class MLflowCallback(Sink):
    name = "MLflow"

    def __init__(self, tracking_uri: str = "", experiment: str = "stride") -> None:
        self.tracking_uri, self.experiment = tracking_uri, experiment
        self.client: Any = None
        self.run_id: str | None = None
        self._pending: list[Any] = []  # the asynchronous log calls not known to be done (RunOperations)
        self._uri = tracking_uri

    def where(self) -> str:
        return shown_uri(self._uri)

    def on_fit_start(self, trainer: TrainerView) -> None:
        if not logs_here():
            return
        uri = self.tracking_uri
        if not uri:
            if trainer.run_dir is None:
                raise ValueError("metrics.mlflow needs a run directory (its store is <run dir>/mlflow) or "
                                 "metrics.mlflow_tracking_uri")
            uri = (trainer.run_dir.path / "mlflow").resolve().as_uri()
        self._uri = uri
        probe(uri)
        try:
            self._start(trainer, uri)
        except ImportError:
            raise
        except Exception as exc:  # noqa: BLE001 (a store that refuses: one line naming it, before the first step)
            if type(exc).__module__.startswith("mlflow") or isinstance(exc, OSError):
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise refused(uri, f"MLflow refused: {one_line(first)[:500]}") from None
            raise

    def _start(self, trainer: TrainerView, uri: str) -> None:
        try:
            import mlflow
            from mlflow.entities import Param
        except ImportError:
            raise missing("mlflow", "mlflow") from None
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
        before = run.data.tags.get(RESUMED_TAG)
        self.client.set_tag(self.run_id, RESUMED_TAG, f"{before},{trainer.step}" if before else str(trainer.step))
        return dict(run.data.params)

    def _log(self, trainer: TrainerView, rec: Mapping[str, Any]) -> None:
        if self.run_id is None:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, int(rec["step"])) for k, v in tracked_metrics(rec).items()]
        self._pending.append(self.client.log_batch(self.run_id, metrics=metrics, synchronous=False))
        if len(self._pending) > MAX_IN_FLIGHT:  # the oldest are long done (else: back-pressure on a slow server)
            old, self._pending = self._pending[:-MAX_IN_FLIGHT // 2], self._pending[-MAX_IN_FLIGHT // 2:]
            for op in old:
                op.wait()

    def _rollback(self, trainer: TrainerView, from_step: int) -> None:
        if self.run_id is None:
            return
        before = self.client.get_run(self.run_id).data.tags.get(ROLLED_BACK_TAG)
        now = f"{from_step}>{trainer.step}"
        self.client.set_tag(self.run_id, ROLLED_BACK_TAG, f"{before},{now}" if before else now)

    def _flush(self) -> None:
        """Wait for the metrics in flight (an error in one is raised here)."""
        pending, self._pending = self._pending, []
        for op in pending:
            op.wait()

    def summary_keys(self, trainer: TrainerView) -> dict[str, Any]:
        return {"mlflow_run_id": self.run_id} if self.failed is None and self.run_id is not None else {}

    def _end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        if self.run_id is None:
            return
        summary["mlflow_run_id"] = self.run_id
        self._flush()
        self.client.log_text(self.run_id, json_text(summary), "summary.json")
        for path in report_files(trainer.run_dir.path if trainer.run_dir is not None else None):
            self.client.log_artifact(self.run_id, str(path))
        self.client.set_terminated(self.run_id, "FINISHED")

    def _close(self, trainer: TrainerView, exc: BaseException | None) -> None:
        if self.run_id is None:
            return
        if self.failed is not None:  # the store failed: no further call to it (one to a server gone can retry
            self._pending = []       # for minutes)
            return
        self._flush()
        stopped = isinstance(exc, SystemExit | KeyboardInterrupt)  # a preemption stop, Ctrl-C: resumable
        self.client.set_terminated(self.run_id, "KILLED" if stopped else "FAILED")
