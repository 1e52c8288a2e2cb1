"""Outside audit of the sinks: a sink's failure costs that sink alone, resumes do not double steps, Prometheus units.

Each test reads back what the real library wrote (TensorBoard's EventAccumulator, MLflow's client, the
endpoint's exposition text) and compares it with the run's own files.
"""

from __future__ import annotations

import errno
import json
import math
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from stride.config import ConfigError, load_config
from stride.metrics.observe import build_observers
from stride.metrics.observe.prometheus import parse_metrics
from stride.metrics.observe.sink import SinkFailedWarning, SinkUnwritable
from stride.train.callbacks import Callback
from stride.train.trainer import Trainer

SMALL = ["data.n_assets=2", "data.n_steps=500", "data.seq_len=16", "model.size=tiny", "train.steps=6",
         "train.batch_size=8", "train.val_every=0", "metrics.log_every=1", "metrics.progress=false",
         "metrics.system_sample_s=0", "optim.warmup_steps=2", "train.threads=1"]
CKPT = ["checkpoint.enabled=true", "checkpoint.every=2"]


class Crash(Callback):
    def on_step_end(self, trainer) -> None:
        if trainer.step == 5:
            raise RuntimeError("crash at step 5")


def _losses(out: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if "loss" in r}


def _tb_steps(out: Path, tag: str = "train/loss") -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_mlflow_failing_at_the_end_costs_only_mlflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """D1: the store's disk fills at the end (async logging fails, MLflow raises from the flush): summary.json is
    written, the run ends normally, one warning names MLflow and the reason."""
    pytest.importorskip("mlflow")
    from mlflow.exceptions import MlflowException

    from stride.metrics.observe.mlflow_logger import MLflowCallback

    def full(self) -> None:
        raise MlflowException("The following failures occurred while performing one or more async logging "
                              "operations: [MlflowException('[Errno 28] No space left on device')]")

    monkeypatch.setattr(MLflowCallback, "_flush", full)
    out = tmp_path / "run"
    with pytest.warns(SinkFailedWarning, match=r"^MLflow \(file://.*mlflow\): MlflowException: .*No space left"):
        result = Trainer(config=load_config(overrides=[*SMALL, "metrics.mlflow=true"]), out=out).fit()
    written = json.loads((out / "summary.json").read_text())
    assert written["steps"] == 6 and written["final_train_loss"] == pytest.approx(_losses(out)[6])
    assert "No space left on device" in written["sink_failures"]["MLflow"]
    assert result.summary["sink_failures"] == written["sink_failures"]


def test_an_unreachable_mlflow_server_is_refused_before_training(tmp_path: Path) -> None:
    """D2: http://127.0.0.1:9 was ~4 minutes of retries, then a 123-line traceback."""
    pytest.importorskip("mlflow")
    out = tmp_path / "run"
    cfg = load_config(overrides=[*SMALL, "metrics.mlflow=true", "metrics.mlflow_tracking_uri=http://127.0.0.1:9"])
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        Trainer(config=cfg, out=out).fit()
    assert time.perf_counter() - t0 < 15
    msg = str(err.value)
    assert msg.startswith("`metrics.mlflow_tracking_uri` = 'http://127.0.0.1:9': the tracking server cannot be "
                          "reached") and "\n" not in msg
    assert not (out / "metrics.jsonl").exists()  # nothing trained


def test_a_resumed_run_shows_each_step_once_in_tensorboard(tmp_path: Path) -> None:
    """D3: killed at step 5, resumed from the checkpoint of step 4: steps 5 were in TensorBoard twice."""
    pytest.importorskip("mlflow")
    out = tmp_path / "run"
    over = [*SMALL, *CKPT, "metrics.tensorboard=true", "metrics.mlflow=true"]
    with pytest.raises(RuntimeError, match="crash at step 5"):
        Trainer(config=load_config(overrides=over), out=out, callbacks=[*build_observers(load_config(
            overrides=over)), Crash()]).fit()
    s = Trainer(config=load_config(overrides=over), out=out).fit().summary
    assert len(list((out / "tensorboard").glob("events.out.tfevents.*"))) == 2
    jsonl = _losses(out)
    assert [step for step, _ in _tb_steps(out)] == [1, 2, 3, 4, 5, 6]
    assert {step: value for step, value in _tb_steps(out)} == pytest.approx(jsonl, rel=1e-6)  # float32 in TB
    from tests.observe.test_trackers import mlflow_store

    run = mlflow_store(out).get_run(s["mlflow_run_id"])
    assert run.data.tags["stride.resumed_at"] == "4"  # MLflow keeps both values of step 5: the tag says so


def test_tensorboard_folder_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    """D5: a file where the folder belongs: a message naming the path, no bytes literal, before training."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "tensorboard").write_text("not a folder")
    with pytest.raises(SinkUnwritable) as err:
        Trainer(config=load_config(overrides=[*SMALL, "metrics.tensorboard=true"]), out=out).fit()
    assert str(err.value) == (f"metrics.tensorboard: cannot write TensorBoard's folder {out / 'tensorboard'}: "
                              f"{out / 'tensorboard'} is not a directory (set metrics.tensorboard = false, or make "
                              "it writable)")
    assert not (out / "metrics.jsonl").exists()


def test_tensorboard_disk_full_mid_run_warns_and_training_goes_on(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """D5: the disk fills under the event file at step 3: one warning naming the file, all 6 steps train."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    real, calls = RecordWriter.write, []

    def write(self, data: bytes) -> None:
        calls.append(1)
        if len(calls) > 20:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, data)

    monkeypatch.setattr(RecordWriter, "write", write)
    out = tmp_path / "run"
    with pytest.warns(SinkFailedWarning, match=r"^TensorBoard \(.*/tensorboard/events\.out\.tfevents\.[^)]*\): "
                                               r".*the disk is full; it logs nothing more"):
        Trainer(config=load_config(overrides=[*SMALL, "metrics.tensorboard=true"]), out=out).fit()
    written = json.loads((out / "summary.json").read_text())
    assert written["steps"] == 6 and sorted(_losses(out)) == [1, 2, 3, 4, 5, 6]
    assert "the disk is full" in written["sink_failures"]["TensorBoard"]


def test_a_refused_resume_leaves_no_empty_tensorboard_file(tmp_path: Path) -> None:
    """D8: the Prometheus port is in use: the resume is refused, and TensorBoard wrote no new events file."""
    out = tmp_path / "run"
    over = [*SMALL, *CKPT, "metrics.tensorboard=true"]
    with pytest.raises(RuntimeError, match="crash at step 5"):
        Trainer(config=load_config(overrides=over), out=out, callbacks=[*build_observers(load_config(
            overrides=over)), Crash()]).fit()
    before = sorted((out / "tensorboard").iterdir())
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ConfigError, match="cannot serve /metrics there"):
            Trainer(config=load_config(overrides=[*over, "metrics.prometheus=true",
                                                  f"metrics.prometheus_port={port}"]), out=out).fit()
    assert sorted((out / "tensorboard").iterdir()) == before and len(before) == 1


class Scrape(Callback):
    def __init__(self, at_step: int) -> None:
        self.at_step, self.text = at_step, ""

    def on_step_end(self, trainer: Trainer) -> None:
        if trainer.step == self.at_step:
            url = json.loads((trainer.run_dir.path / "prometheus.json").read_text())["url"]
            with urllib.request.urlopen(url, timeout=10) as resp:
                self.text = resp.read().decode()


def test_prometheus_mfu_while_training_unset_values_nan_and_base_units(tmp_path: Path) -> None:
    """D6: MFU was set only as the endpoint stopped; unset values read 0.0; CPU was a percent."""
    cfg = load_config(overrides=[*SMALL, "metrics.prometheus=true", "metrics.system_sample_s=0.05"])
    scrape = Scrape(at_step=3)
    trainer = Trainer(config=cfg, out=tmp_path / "run", callbacks=[*build_observers(cfg), scrape])
    trainer.fit()
    m = parse_metrics(scrape.text)
    assert math.isnan(m["stride_val_loss"])  # no validation in this run
    assert 0 < m["stride_mfu_ratio"] < 1
    assert "stride_mfu" not in m and "stride_process_cpu_percent" not in m
    assert 0 <= m["stride_process_cpu_ratio"] < 64
    assert not any(k.startswith("stride_gpu{") for k in m)


def test_prometheus_before_the_first_step_exports_nan_not_zero(tmp_path: Path) -> None:
    """D6: the loss, lr and validation loss before anything is logged."""
    from stride.metrics.observe.prometheus import PrometheusCallback

    cb = PrometheusCallback()
    from prometheus_client import generate_latest

    m = parse_metrics(generate_latest(cb.registry).decode())
    assert all(math.isnan(m[k]) for k in ("stride_train_loss", "stride_val_loss", "stride_learning_rate",
                                          "stride_mfu_ratio"))


def test_the_cli_says_again_at_the_end_which_sink_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`stride train` ends with a line naming the failed sink (its warning may be far up a long log), exit 0."""
    pytest.importorskip("mlflow")
    from mlflow.exceptions import MlflowException

    from stride.cli.main import main
    from stride.metrics.observe.mlflow_logger import MLflowCallback

    def full(self) -> None:
        raise MlflowException("[Errno 28] No space left on device")

    monkeypatch.setattr(MLflowCallback, "_flush", full)
    sets = [a for kv in [*SMALL, "metrics.mlflow=true", "metrics.progress=false"] for a in ("--set", kv)]
    rc = main(["train", "configs/quickstart.toml", *sets, "--out", str(tmp_path / "run")])
    assert rc == 0
    err = capsys.readouterr().err
    assert "stride train: warning: MLflow (file://" in err  # the warning when it failed (the CLI prints warnings)
    assert "stride train: MLflow stopped logging during the run: MlflowException: [Errno 28] No space left on device" \
        in err
