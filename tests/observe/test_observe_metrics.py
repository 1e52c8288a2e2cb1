"""Observers read back: TensorBoard event files, the Prometheus endpoint scraped mid-run, system samples."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from stride.config import ConfigError, load_config
from stride.metrics.observe import build_observers
from stride.metrics.observe.prometheus import PrometheusCallback, parse_metrics
from stride.metrics.observe.system import SystemCallback, SystemSampler
from stride.metrics.observe.tensorboard import TensorBoardCallback
from stride.train.callbacks import Callback
from stride.train.trainer import Trainer

TINY = ["data.n_assets=4", "data.n_steps=1024", "data.seq_len=16", "train.batch_size=32", "train.steps=6",
        "train.val_every=0", "metrics.progress=false", "train.threads=1", "metrics.log_every=1",
        "metrics.skip_steps=0", "optim.warmup_steps=2"]


def tiny(*extra: str):
    return load_config(overrides=TINY + list(extra))


def _observers(trainer: Trainer) -> list[Callback]:
    return [cb for cb in trainer.callbacks if isinstance(cb, SystemCallback | TensorBoardCallback | PrometheusCallback)]


def test_build_observers_follows_config() -> None:
    kinds = [type(cb).__name__ for cb in build_observers(tiny())]
    assert kinds == ["SystemCallback"]  # CPU/RSS on every run; TensorBoard and Prometheus off by default
    kinds = [type(cb).__name__ for cb in build_observers(tiny("metrics.tensorboard=true", "metrics.prometheus=true",
                                                             "metrics.system_sample_s=0"))]
    assert kinds == ["TensorBoardCallback", "PrometheusCallback"]


@pytest.mark.parametrize("override, needle", [("metrics.prometheus_port=70000", "prometheus_port"),
                                              ('metrics.prometheus_host=" "', "prometheus_host"),
                                              ("metrics.system_sample_s=-1", "system_sample_s")])
def test_bad_observer_config_is_named(override: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        tiny(override)


def test_tensorboard_scalars_match_metrics_jsonl(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = tiny("metrics.tensorboard=true", "metrics.system_sample_s=0.05")
    trainer = Trainer(config=cfg, out=tmp_path / "run")
    assert [type(cb).__name__ for cb in _observers(trainer)] == ["SystemCallback", "TensorBoardCallback"]
    result = trainer.fit()
    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ("train/loss", "train/lr", "perf/samples_per_s", "perf/step_time_s", "breakdown/forward_s",
                "breakdown/backward_s", "breakdown/optimizer_s", "breakdown/data_s", "perf/mfu",
                "memory/peak_bytes", "system/rss_bytes"):
        assert tag in tags, f"{tag} missing from {sorted(tags)}"
    lines = [json.loads(s) for s in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in lines if "loss" in r]
    events = acc.Scalars("train/loss")
    assert [e.step for e in events] == [r["step"] for r in logged] == [1, 2, 3, 4, 5, 6]
    # TensorBoard stores float32: equal to the jsonl float64 within one float32 ulp.
    assert [e.value for e in events] == pytest.approx([r["loss"] for r in logged], rel=1e-7)
    fwd = acc.Scalars("breakdown/forward_s")
    assert [e.value for e in fwd] == pytest.approx([r["breakdown_s"]["forward"] for r in logged], rel=1e-6)
    (mfu,) = acc.Scalars("perf/mfu")
    assert mfu.step == 6 and mfu.value == pytest.approx(result.summary["mfu"], rel=1e-6)
    (peak,) = acc.Scalars("memory/peak_bytes")
    assert peak.value == pytest.approx(result.summary["peak_mem_bytes"], rel=1e-6)


class Scrape(Callback):
    """Scrapes the run's own endpoint over HTTP at a chosen step, while training is running."""

    def __init__(self, at_step: int) -> None:
        self.at_step = at_step
        self.text: str | None = None
        self.seen: dict | None = None

    def on_step_end(self, trainer: Trainer) -> None:
        if trainer.step == self.at_step:
            url = json.loads((trainer.run_dir.path / "prometheus.json").read_text())["url"]
            assert url.startswith("http://127.0.0.1:")
            with urllib.request.urlopen(url, timeout=10) as resp:
                self.text = resp.read().decode()
            self.seen = {"step": trainer.step, "loss": trainer.history[-1]["loss"], "last": dict(trainer.timer.last)}


def test_prometheus_endpoint_scraped_during_training(tmp_path: Path) -> None:
    cfg = tiny("metrics.prometheus=true", "metrics.system_sample_s=0.05")
    scrape = Scrape(at_step=4)
    # The scraper after the observers (given, they replace the config's): it sees step 4's values.
    trainer = Trainer(config=cfg, out=tmp_path / "run", callbacks=[*build_observers(cfg), scrape])
    result = trainer.fit()
    m = parse_metrics(scrape.text)
    assert m["stride_step"] == 4 and m["stride_steps_total"] == 4
    assert m["stride_train_loss"] == scrape.seen["loss"]
    assert m["stride_step_seconds"] == scrape.seen["last"]["total"]
    assert m['stride_step_phase_seconds{phase="forward"}'] == scrape.seen["last"]["forward"]
    assert m["stride_samples_per_second"] == pytest.approx(32 / scrape.seen["last"]["total"], rel=1e-12)
    assert m["stride_process_rss_bytes"] > 10e6  # a torch process holds tens of MB at least
    # After fit() the server is shut down: the port no longer answers.
    url = result.summary["prometheus_url"]
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)


def test_prometheus_binds_where_told(tmp_path: Path) -> None:
    cb = PrometheusCallback(host="127.0.0.1", port=0)

    class Fake:  # the two attributes on_fit_start reads; a real trainer is tested above
        run_dir = None

    cb.on_fit_start(Fake())  # type: ignore[arg-type]
    try:
        assert cb.server.server_address[0] == "127.0.0.1" and cb.server.server_address[1] > 0
        with urllib.request.urlopen(cb.url, timeout=5) as resp:
            assert b"stride_steps_total 0.0" in resp.read()
    finally:
        cb.server.shutdown()
        cb.server.server_close()


def test_system_sampler_rss_and_cpu(tmp_path: Path) -> None:
    import numpy as np
    import psutil

    s = SystemSampler(0.02, tmp_path / "system.jsonl")
    s.start()
    block = np.ones(64 * 2**20 // 8)  # 64 MiB touched: RSS must rise by about that much
    x = 0.0
    for _ in range(200):
        x += float(np.sqrt(block[:100000]).sum())  # busy: CPU percent must be well above 0
    rss_now = psutil.Process().memory_info().rss
    agg = s.stop()
    del block
    rows = [json.loads(line) for line in (tmp_path / "system.jsonl").read_text().splitlines()]
    assert len(rows) >= 2 and agg["samples"] == len(rows)  # the final sample on stop is written too
    assert agg["rss_peak_bytes"] >= rss_now - 8 * 2**20  # the last sample saw the 64 MiB block
    assert agg["cpu_percent_mean"] > 10
    assert agg["nvml"] is False  # no pynvml here: skipped cleanly
    assert "gpus" not in rows[0]


def test_system_summary_on_every_run(tmp_path: Path) -> None:
    result = Trainer(config=tiny(), out=tmp_path / "run").fit()
    sysinfo = result.summary["system"]
    assert sysinfo["samples"] >= 1 and sysinfo["rss_peak_bytes"] > 10e6
