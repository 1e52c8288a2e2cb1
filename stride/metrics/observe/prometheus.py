"""A Prometheus /metrics endpoint for a live run (off by default; binds 127.0.0.1 unless told).

Each callback owns its CollectorRegistry, so two trainers in one process never collide. With
port 0 the OS picks a free port; the bound address goes to `<run dir>/prometheus.json` so a
scraper (or a test) can find it.

Metrics, in base units as Prometheus's naming conventions ask (one unit per metric):
`stride_steps_total`, `stride_step`, `stride_train_loss`, `stride_val_loss`, `stride_learning_rate`,
`stride_samples_per_second`, `stride_step_seconds`, `stride_step_phase_seconds{phase}`, `stride_mfu_ratio`
(the last step's MFU while training: its model FLOPs over its wall time over the peak FLOP/s the summary
divides by; the run's mean MFU once it has ended), `stride_process_rss_bytes`, `stride_process_cpu_ratio`
(1 = one core busy), and per NVML device `stride_gpu_utilization_ratio{gpu}`,
`stride_gpu_memory_used_bytes{gpu}`, `stride_gpu_memory_total_bytes{gpu}`, `stride_gpu_power_watts{gpu}`,
`stride_gpu_temperature_celsius{gpu}`, `stride_gpu_sm_clock_hertz{gpu}`. A value not known yet (the loss before
the first logged step, the validation loss of a run without validation, the MFU where FLOPs are not counted) is
NaN, not 0. Before (outside audit of the sinks) they read 0.0, the GPU fields shared one metric
`stride_gpu{field}` across units, and MFU was set only as the endpoint stopped, so no scrape ever saw it.
The endpoint stops with the run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from stride.config.errors import ConfigError
from stride.metrics.observe.sink import Sink
from stride.metrics.observe.system import SystemCallback
from stride.shown_text import plain
from stride.train.callbacks import TrainerView

# system.jsonl's GPU field -> (metric name, help, factor to the base unit)
GPU_METRICS = {
    "util_percent": ("stride_gpu_utilization_ratio", "NVML GPU utilisation (1 = busy the whole sample)", 0.01),
    "mem_used_bytes": ("stride_gpu_memory_used_bytes", "NVML device memory in use", 1.0),
    "mem_total_bytes": ("stride_gpu_memory_total_bytes", "NVML device memory", 1.0),
    "power_w": ("stride_gpu_power_watts", "NVML board power draw", 1.0),
    "temperature_c": ("stride_gpu_temperature_celsius", "NVML GPU temperature", 1.0),
    "sm_clock_mhz": ("stride_gpu_sm_clock_hertz", "NVML SM clock", 1e6),
}


class PrometheusCallback(Sink):
    name = "Prometheus"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, system: SystemCallback | None = None) -> None:
        self.host, self.port, self.system = host, port, system
        self.registry = CollectorRegistry()
        r = self.registry
        self.steps = Counter("stride_steps", "optimizer steps taken", registry=r)
        self.step = Gauge("stride_step", "current optimizer step", registry=r)
        self.loss = Gauge("stride_train_loss", "last logged training loss", registry=r)
        self.val_loss = Gauge("stride_val_loss", "last validation loss", registry=r)
        self.lr = Gauge("stride_learning_rate", "learning rate of the first param group", registry=r)
        self.samples = Gauge("stride_samples_per_second", "samples/s of the last step", registry=r)
        self.step_time = Gauge("stride_step_seconds", "wall time of the last step", registry=r)
        self.phase = Gauge("stride_step_phase_seconds", "last step's time per phase", ["phase"], registry=r)
        self.rss = Gauge("stride_process_rss_bytes", "resident set size of the training process", registry=r)
        self.cpu = Gauge("stride_process_cpu_ratio", "CPU use of the process (1 = one core busy)", registry=r)
        self.mfu = Gauge("stride_mfu_ratio", "model FLOPs utilisation: the last step's while training, the run's "
                         "mean once ended", registry=r)
        self.gpu = {key: Gauge(name, doc, ["gpu"], registry=r) for key, (name, doc, _f) in GPU_METRICS.items()}
        for g in (self.loss, self.val_loss, self.lr, self.samples, self.step_time, self.rss, self.cpu, self.mfu):
            g.set(math.nan)  # not known yet: NaN, never a 0 that reads as a value
        self.server: Any = None
        self.url: str | None = None

    def where(self) -> str:
        return self.url or f"{self.host}:{self.port}"

    def on_fit_start(self, trainer: TrainerView) -> None:
        try:
            self.server, _thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except (OSError, UnicodeError, ValueError) as exc:
            # a name that does not resolve, a port in use, an address not here: the socket library's words alone
            # ("Name or service not known", or a UnicodeError traceback from the idna codec), naming no key (audit 20)
            reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__
            raise ConfigError(f"`metrics.prometheus_host` = {self.host!r}, `metrics.prometheus_port` = "
                              f"{self.port}: cannot serve /metrics there: {plain(reason)} (127.0.0.1 and port 0 bind "
                              "a free local port)") from None
        host, port = self.server.server_address[:2]
        self.url = f"http://{host}:{port}/metrics"
        if trainer.run_dir is not None:
            trainer.run_dir.write_json("prometheus.json", {"url": self.url, "host": host, "port": port})

    def _log(self, trainer: TrainerView, rec: Mapping[str, Any]) -> None:
        if rec.get("loss") is not None:
            self.loss.set(rec["loss"])
        if rec.get("lr") is not None:
            self.lr.set(rec["lr"])
        if rec.get("val_loss") is not None:
            self.val_loss.set(rec["val_loss"])

    def _step_end(self, trainer: TrainerView) -> None:
        self.steps.inc()
        self.step.set(trainer.step)
        parts = trainer.timer.last or {}
        if "total" in parts:
            self.step_time.set(parts["total"])
            if parts["total"]:
                # the step's own batch (train.batch_size is what the config asked, not what an iterable gave)
                done = trainer.step_samples
                samples = done[-1] if done else trainer.cfg.train.batch_size
                self.samples.set(samples / parts["total"])
                mfu = step_mfu(trainer, samples, parts["total"])
                if mfu is not None:
                    self.mfu.set(mfu)
        for phase, sec in parts.items():
            if phase != "total":
                self.phase.labels(phase=phase).set(sec)
        latest = self.system.sampler.latest if self.system is not None and self.system.sampler is not None else None
        if latest is not None:
            self.rss.set(latest["rss_bytes"])
            self.cpu.set(latest["cpu_percent"] / 100)
            for g in latest.get("gpus", []):
                for key, (_name, _doc, factor) in GPU_METRICS.items():
                    val = g.get(key)
                    if isinstance(val, int | float) and not isinstance(val, bool):
                        self.gpu[key].labels(gpu=str(g["index"])).set(val * factor)

    def _end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        if summary.get("mfu") is not None:
            self.mfu.set(summary["mfu"])
        self._stop()
        summary["prometheus_url"] = self.url

    def summary_keys(self, trainer: TrainerView) -> dict[str, Any]:
        return {"prometheus_url": self.url} if self.failed is None else {}

    def _close(self, trainer: TrainerView, exc: BaseException | None) -> None:
        self._stop()  # the port is free again for the next run

    def _stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def step_mfu(trainer: TrainerView, samples: int, seconds: float) -> float | None:
    """The last step's MFU: its model FLOPs (the counted step's, scaled to this step's samples) per second over
    the peak FLOP/s the summary's MFU divides by; None where FLOPs are not counted or the peak is unknown."""
    flops, counted = getattr(trainer, "flops_per_step", None), getattr(trainer, "flops_samples", None)
    peak = getattr(getattr(trainer, "peak", None), "flops_per_s", None)
    if not flops or not counted or not peak or seconds <= 0:
        return None
    return flops * samples / counted / seconds / peak


def parse_metrics(text: str) -> dict[str, float]:
    """Exposition text to {'name{labels}': value}, for tests and `stride top`; uses prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out
