"""Progress bar (steps, loss, throughput, ETA) on a terminal; plain log lines elsewhere (CI, files)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


class TrainProgress:
    def __init__(self, total: int, enabled: bool = True, name: str = "train") -> None:
        self.console = Console(stderr=True)
        self.enabled = enabled
        self.live = enabled and self.console.is_terminal
        self.total = total
        self._bar: Progress | None = None
        if self.live:
            self._bar = Progress(
                TextColumn(f"[bold]{name}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[tput]} samples/s"),
                TimeRemainingColumn(), console=self.console, refresh_per_second=4,
            )
            self._task = self._bar.add_task(name, total=total, loss="-", tput="-")
            self._bar.start()

    def advance(self, step: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=step)

    def log(self, step: int, loss: float, samples_per_s: float, val_loss: float | None = None) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=step, loss=f"{loss:.4f}", tput=f"{samples_per_s:,.0f}")
        else:
            extra = f" val_loss {val_loss:.4f}" if val_loss is not None else ""
            print(f"step {step}/{self.total} loss {loss:.4f} {samples_per_s:,.0f} samples/s{extra}",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
