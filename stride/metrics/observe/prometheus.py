"""A Prometheus /metrics endpoint for a live run (off by default; binds 127.0.0.1 unless told).

Each callback owns its CollectorRegistry, so two trainers in one process never collide. With
port 0 the OS picks a free port; the bound address goes to `<run dir>/prometheus.json` so a
scraper (or a test) can find it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from stride.config.errors import ConfigError
from stride.metrics.observe.system import SystemCallback
from stride.shown_text import plain
from stride.train.callbacks import Callback, TrainerView


class PrometheusCallback(Callback):
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
        self.cpu = Gauge("stride_process_cpu_percent", "CPU use of the process (100 = one core)", registry=r)
        self.mfu = Gauge("stride_mfu", "model FLOPs utilisation of the finished run", registry=r)
        self.gpu = Gauge("stride_gpu", "NVML device health", ["gpu", "field"], registry=r)
        self.server: Any = None
        self.url: str | None = None

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

    def on_log(self, trainer: TrainerView, rec: Mapping[str, Any]) -> None:
        if "loss" in rec:
            self.loss.set(rec["loss"])
            self.lr.set(rec["lr"])
        if rec.get("val_loss") is not None:
            self.val_loss.set(rec["val_loss"])

    def on_step_end(self, trainer: TrainerView) -> None:
        self.steps.inc()
        self.step.set(trainer.step)
        parts = trainer.timer.last or {}
        if "total" in parts:
            self.step_time.set(parts["total"])
            if parts["total"]:
                # the step's own batch (train.batch_size is what the config asked, not what an iterable gave)
                done = trainer.step_samples
                self.samples.set((done[-1] if done else trainer.cfg.train.batch_size) / parts["total"])
        for phase, sec in parts.items():
            if phase != "total":
                self.phase.labels(phase=phase).set(sec)
        latest = self.system.sampler.latest if self.system is not None and self.system.sampler is not None else None
        if latest is not None:
            self.rss.set(latest["rss_bytes"])
            self.cpu.set(latest["cpu_percent"])
            for g in latest.get("gpus", []):
                for key, val in g.items():
                    if key != "index" and isinstance(val, int | float):
                        self.gpu.labels(gpu=str(g["index"]), field=key).set(val)

    def on_fit_end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        if summary.get("mfu") is not None:
            self.mfu.set(summary["mfu"])
        self._stop()
        summary["prometheus_url"] = self.url

    def on_fit_abort(self, trainer: TrainerView, exc: BaseException) -> None:
        self._stop()  # the port is free again for the next run

    def _stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def parse_metrics(text: str) -> dict[str, float]:
    """Exposition text to {'name{labels}': value}, for tests and `stride top`; uses prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out
