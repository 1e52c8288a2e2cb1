"""Weights & Biases, offline by default: the same content as the MLflow logger, in `<run dir>/wandb`.

`metrics.wandb = true`. `metrics.wandb_mode = "offline"` (the default) writes the run under
`<run dir>/wandb/offline-run-*/` and needs no account or network; `wandb sync <that folder>` uploads it
later. `online` logs live (after `wandb login`). The config goes in as the run's config (nested as in
config.toml), every logged record at its step, summary.json's text and a report (where there is one) into
the run's files; the run id goes into summary.json (`wandb_run_id`). A run continued from a checkpoint
logs under its W&B run's id: online, W&B resumes that run (it keeps steps increasing, so steps redone after a
crash are dropped the second time); offline, W&B 0.31 does not resume (wandb/wandb#2423): each continuation
is its own `offline-run-*` folder under the same id. W&B's own console capture and system sampling are off
(stride samples the system itself: system.jsonl). The offline file is complete only once W&B's service has
closed the run's stream, shortly after `fit()` returns and at the latest at the process's exit: a script that
reads or syncs it in the same process calls `wandb.teardown()` first (measured: until then the file held only
its 7-byte header). That also means a process killed with SIGKILL can leave the offline file without steps its
checkpoints cover (outside audit of the sinks: the file held only its header after steps 1-20 and a checkpoint at
20): W&B 0.31 has no public call that makes its service write the file out mid-run (`run.log` only queues), so
this is documented, not fixed; metrics.jsonl and the checkpoint hold those steps.

A rollback in the loop (the step guard's, from step 9 back to the checkpoint at step 6): W&B's steps only
increase, so its history keeps the rolled-back values of steps 7-9 and would drop the redone ones with a warning
each; they are not sent (the next value logged is step 10's), the run is tagged `rolled-back` (the run table shows
and filters on it) and its summary key `stride/rolled_back` lists the rollbacks as `from>to` ("9>6").
metrics.jsonl holds the redone values (rollbacks.jsonl the rolled-back ones), and TensorBoard shows the redone ones.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stride.config.loader import config_to_dict
from stride.metrics.observe.sink import Sink
from stride.metrics.observe.tracking import (
    earlier_tracking,
    logs_here,
    missing,
    remember_tracking,
    report_files,
    tracked_metrics,
)
from stride.metrics.run_dir import json_text
from stride.train.callbacks import TrainerView

ROLLED_BACK_KEY = "stride/rolled_back"  # the run's summary key: the rollbacks, "9>6,15>12"
ROLLED_BACK_TAG = "rolled-back"  # the run's tag once a rollback happened: its history holds rolled-back values


class WandbCallback(Sink):
    name = "W&B"

    def __init__(self, mode: str = "offline", project: str = "stride", name: str = "") -> None:
        self.mode, self.project, self.run_name = mode, project, name
        self.run: Any = None
        self._dir = ""
        self._skip_through = 0  # the step a rollback left: W&B holds it and would drop the redone steps up to it
        self._rolled_back: list[str] = []

    def where(self) -> str:
        return self._dir

    def on_fit_start(self, trainer: TrainerView) -> None:
        if not logs_here():
            return
        try:
            import wandb
        except ImportError:
            raise missing("wandb", "wandb") from None
        if trainer.run_dir is None:
            raise ValueError("metrics.wandb needs a run directory (the W&B run is written to <run dir>/wandb)")
        settings = wandb.Settings(console="off", x_disable_stats=True, disable_git=True, save_code=False,
                                  silent=True)
        earlier = earlier_tracking(trainer, "wandb").get("id")  # a run continued from a checkpoint: its W&B run
        self.run = wandb.init(project=self.project, name=self.run_name or trainer.cfg.train.name, mode=self.mode,
                              dir=str(trainer.run_dir.path), config=config_to_dict(trainer.cfg), settings=settings,
                              reinit="create_new", id=earlier,
                              resume="allow" if earlier and self.mode == "online" else None,
                              allow_val_change=bool(earlier))
        self._dir = str(Path(self.run.dir).parent) if self.mode == "offline" else f"{self.mode} run {self.run.id}"
        remember_tracking(trainer, "wandb", {"id": self.run.id})

    def _log(self, trainer: TrainerView, rec: Mapping[str, Any]) -> None:
        if self.run is not None and int(rec["step"]) > self._skip_through:
            self.run.log(tracked_metrics(rec), step=int(rec["step"]))

    def _rollback(self, trainer: TrainerView, from_step: int) -> None:
        if self.run is not None:
            self._skip_through = max(self._skip_through, from_step)
            before = self.run.summary.get(ROLLED_BACK_KEY) if not self._rolled_back else None
            if isinstance(before, str) and before:  # an online run resumed by a later process: its earlier rollbacks
                self._rolled_back.append(before)
            self._rolled_back.append(f"{from_step}>{trainer.step}")
            self.run.summary[ROLLED_BACK_KEY] = ",".join(self._rolled_back)
            # and a tag, which the project's run table shows and filters on (a summary key is seen on the run's page)
            if ROLLED_BACK_TAG not in self.run.tags:
                self.run.tags = (*self.run.tags, ROLLED_BACK_TAG)

    def summary_keys(self, trainer: TrainerView) -> dict[str, Any]:
        if self.failed is not None or self.run is None:
            return {}
        return {"wandb_run_id": self.run.id, "wandb_run_dir": str(Path(self.run.dir).parent)}

    def _end(self, trainer: TrainerView, summary: dict[str, Any]) -> None:
        if self.run is None:
            return
        files = Path(self.run.dir)
        summary["wandb_run_id"] = self.run.id
        summary["wandb_run_dir"] = str(files.parent)
        (files / "summary.json").write_text(json_text(summary))
        for path in report_files(trainer.run_dir.path if trainer.run_dir is not None else None):
            shutil.copy2(path, files / path.name)
        self.run.finish()
        self.run = None

    def _close(self, trainer: TrainerView, exc: BaseException | None) -> None:
        run, self.run = self.run, None
        if run is not None:
            run.finish(exit_code=1)
