"""CPU utilisation, RSS and (where NVIDIA's NVML is importable) GPU health, sampled in a background thread.

Sampling in a thread keeps the step loop free of syscalls; samples go to `<run dir>/system.jsonl`
(one complete JSON line each) and the latest one is shared with the other observers.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from stride.files import strict_json
from stride.files.append_file import open_append
from stride.train.callbacks import Callback, TrainerView


class Nvml:
    """NVML device health (utilisation, memory, power, temperature, clocks, ECC, throttle reasons).

    `Nvml.open()` returns None where pynvml is missing or no driver answers, so CPU runs skip it.
    """

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self.nv = nvml
        self.handles = handles

    @classmethod
    def open(cls) -> Nvml | None:
        try:
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # ImportError, or NVMLError without a driver: no GPU health on this host
            return None
        return cls(pynvml, handles)

    def _get(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self.nv, fn)(*args)
        except Exception:  # a field the device does not support (ECC on consumer cards, power on some)
            return None

    def sample(self) -> list[dict[str, Any]]:
        nv, out = self.nv, []
        for i, h in enumerate(self.handles):
            util = self._get("nvmlDeviceGetUtilizationRates", h)
            mem = self._get("nvmlDeviceGetMemoryInfo", h)
            power = self._get("nvmlDeviceGetPowerUsage", h)  # milliwatts
            out.append({
                "index": i,
                "util_percent": getattr(util, "gpu", None),
                "mem_util_percent": getattr(util, "memory", None),
                "mem_used_bytes": getattr(mem, "used", None),
                "mem_total_bytes": getattr(mem, "total", None),
                "power_w": power / 1000 if power is not None else None,
                "temperature_c": self._get("nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU),
                "sm_clock_mhz": self._get("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM),
                "mem_clock_mhz": self._get("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_MEM),
                "ecc_uncorrected": self._get("nvmlDeviceGetTotalEccErrors", h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                             nv.NVML_VOLATILE_ECC),
                "throttle_reasons": self._get("nvmlDeviceGetCurrentClocksThrottleReasons", h),
            })
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nv.nvmlShutdown()


class SystemSampler:
    """Samples this process's CPU percent and RSS every `period_s` seconds until stopped."""

    def __init__(self, period_s: float, out: Path | None = None) -> None:
        if period_s <= 0:
            raise ValueError(f"SystemSampler period_s = {period_s!r} must be > 0")
        self.period_s = period_s
        self.out = out
        self.proc = psutil.Process()
        self.nvml = Nvml.open()
        self.latest: dict[str, Any] | None = None
        self.samples = 0
        self.rss_peak = 0
        self.cpu_sum = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.proc.cpu_percent(None)  # prime: the first call measures from here
        psutil.cpu_percent(None)

    def sample(self) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "time": time.time(),
            "cpu_percent": self.proc.cpu_percent(None),  # of one core: 200 = two cores busy
            "system_cpu_percent": psutil.cpu_percent(None),
            "rss_bytes": self.proc.memory_info().rss,
            "threads": self.proc.num_threads(),
        }
        if self.nvml is not None:
            rec["gpus"] = self.nvml.sample()
        self.latest = rec
        self.samples += 1
        self.rss_peak = max(self.rss_peak, rec["rss_bytes"])
        self.cpu_sum += rec["cpu_percent"]
        return rec

    def _write(self, f: Any, rec: dict[str, Any]) -> None:
        if f is not None:
            f.write(strict_json.dumps(rec) + "\n")

    def _run(self, f: Any) -> None:
        try:
            stopping = False
            while not stopping:
                stopping = self._stop.wait(self.period_s)
                self._write(f, self.sample())  # one last sample on stop, so even a short run has one line
        finally:
            if f is not None:
                f.close()

    def start(self) -> None:
        f = open_append(self.out, buffering=1) if self.out is not None else None
        # One sample now, so the other observers have RSS and CPU from the first step on, however
        # short the steps are against the period (a 4-step run could otherwise finish unsampled).
        self._write(f, self.sample())
        self._thread = threading.Thread(target=self._run, args=(f,), name="stride-system-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        """Stop the thread, take one last sample, and return the run's aggregate."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.period_s + 1)
        if self.samples == 0:
            self.sample()
        if self.nvml is not None:
            self.nvml.close()
        return self.aggregate()

    def aggregate(self) -> dict[str, Any]:
        """The samples taken so far: count, mean CPU percent, peak RSS (summary.json `system`)."""
        return {
            "samples": self.samples,
            "cpu_percent_mean": self.cpu_sum / self.samples if self.samples else None,
            "rss_peak_bytes": self.rss_peak,
            "nvml": self.nvml is not None,
        }


class SystemCallback(Callback):
    """Runs a SystemSampler for the length of fit() and adds `summary["system"]`."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.sampler: SystemSampler | None = None
        self._had: int | None = None  # system.jsonl's size before this run appended to it (None: there was none)

    def on_fit_start(self, trainer: TrainerView) -> None:
        out = trainer.run_dir.path / "system.jsonl" if trainer.run_dir is not None else None
        self._had = out.stat().st_size if out is not None and out.is_file() else None
        self.sampler = SystemSampler(self.period_s, out)
        self.sampler.start()

    def on_fit_end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        if self.sampler is not None:
            summary["system"] = self.sampler.stop()

    def summary_keys(self, trainer: TrainerView) -> dict[str, Any]:
        return {"system": self.sampler.aggregate()} if self.sampler is not None else {}

    def on_fit_abort(self, trainer: TrainerView, exc: BaseException) -> None:
        if self.sampler is None:
            return
        self.sampler.stop()  # the thread would go on writing system.jsonl into a folder let go
        run = trainer.run_dir
        if run is not None and not run.written:
            # A run that failed before it wrote anything of its own (an observer after this one could not start: an
            # address that does not bind) leaves the folder as it found it, which RunDir.close() then removes if it
            # made it: a folder holding only system.jsonl was left behind (outside audit 20).
            path = run.path / "system.jsonl"
            with contextlib.suppress(OSError):
                if path.is_symlink():  # not truncated through a link (open_append refused to write through it)
                    return
                if self._had is None:
                    path.unlink()
                else:
                    os.truncate(path, self._had)
