"""TensorBoard scalars beside metrics.jsonl: loss, lr, throughput, step-time breakdown, memory, MFU.

Writes every record the trainer logs (`on_log`: TensorBoard and metrics.jsonl agree step for step) to
`<run dir>/tensorboard`, plus the run's summary figures (MFU, peak memory) at the last step.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from stride.metrics.observe.system import SystemCallback
from stride.train.callbacks import Callback, TrainerView

# summary.json key -> TensorBoard tag, written once at the end of the run.
SUMMARY_TAGS = {
    "mfu": "perf/mfu",
    "achieved_flops_per_s": "perf/achieved_flops_per_s",
    "samples_per_s": "perf/samples_per_s_mean",
    "step_time_s": "perf/step_time_s_mean",
    "peak_mem_bytes": "memory/peak_bytes",
    "saved_activation_bytes": "memory/saved_activation_bytes",
}


class TensorBoardCallback(Callback):
    def __init__(self, log_dir: str | Path | None = None, system: SystemCallback | None = None) -> None:
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.system = system
        self.writer: Any = None
        self._logged = False  # a record was written this step: memory and system scalars go beside it

    def on_fit_start(self, trainer: TrainerView) -> None:
        from torch.utils.tensorboard import SummaryWriter  # heavy import: only when switched on

        log_dir = self.log_dir
        if log_dir is None:
            if trainer.run_dir is None:
                raise ValueError("metrics.tensorboard needs a run directory (Trainer(write_run_dir=True)) or a log_dir")
            log_dir = trainer.run_dir.path / "tensorboard"
        self.log_dir = log_dir
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def on_log(self, trainer: TrainerView, rec: Mapping[str, Any]) -> None:
        self._logged = True
        step, w = rec["step"], self.writer
        for key, tag in (("loss", "train/loss"), ("val_loss", "val/loss"), ("lr", "train/lr"),
                         ("samples_per_s", "perf/samples_per_s"), ("step_time_s", "perf/step_time_s")):
            if rec.get(key) is not None:
                w.add_scalar(tag, rec[key], step)
        for phase, sec in (rec.get("breakdown_s") or {}).items():
            w.add_scalar(f"breakdown/{phase}_s", sec, step)

    def on_step_end(self, trainer: TrainerView) -> None:
        if not self._logged:
            return
        self._logged = False
        step = trainer.step
        if trainer.device.type == "cuda":
            self.writer.add_scalar("memory/cuda_allocated_bytes", torch.cuda.memory_allocated(trainer.device), step)
            self.writer.add_scalar("memory/cuda_reserved_bytes", torch.cuda.memory_reserved(trainer.device), step)
        latest = self.system.sampler.latest if self.system is not None and self.system.sampler is not None else None
        if latest is not None:
            self.writer.add_scalar("system/rss_bytes", latest["rss_bytes"], step)
            self.writer.add_scalar("system/cpu_percent", latest["cpu_percent"], step)
            for g in latest.get("gpus", []):
                for key in ("util_percent", "mem_used_bytes", "power_w", "temperature_c", "sm_clock_mhz"):
                    if g.get(key) is not None:
                        self.writer.add_scalar(f"gpu{g['index']}/{key}", g[key], step)

    def on_fit_end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        if self.writer is None:
            return
        for key, tag in SUMMARY_TAGS.items():
            if summary.get(key) is not None:
                self.writer.add_scalar(tag, summary[key], trainer.step)
        self.writer.close()
        summary["tensorboard_dir"] = str(self.log_dir)

    def on_fit_abort(self, trainer: TrainerView, exc: BaseException) -> None:
        if self.writer is not None:  # flush what was logged up to the failure
            self.writer.close()
