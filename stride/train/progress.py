"""Progress bar (steps, loss, throughput, ETA) on a terminal; plain log lines elsewhere (CI, files).

The bar is redrawn from the loop itself, at most every `REFRESH_S` seconds (one clock read a step
to decide), and at every log line: rich's own refresh thread redrew it 4 times a second whatever
the loop did, 6.7 ms of CPU a second (measured, AMD EPYC) taken from the step's cores.
"""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from stride.shown_text import plain

REFRESH_S = 0.5


class TrainProgress:
    def __init__(self, total: int, enabled: bool = True, name: str = "train") -> None:
        self.enabled = enabled
        self.console = Console(stderr=True) if enabled else None
        self.live = enabled and self.console is not None and self.console.is_terminal
        self.total = total
        self._bar: Progress | None = None
        self._next_refresh = 0.0
        if self.live:
            # the run's name (train.name) is text: neither markup (`lstm[bs=64]`) nor a format string (`{`)
            self._bar = Progress(
                TextColumn("{task.description}", style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[tput]} samples/s"),
                TimeRemainingColumn(), console=self.console, auto_refresh=False,
            )
            self._task = self._bar.add_task(plain(name), total=total, loss="-", tput="-")
            self._bar.start()

    def advance(self, step: int) -> None:
        if self._bar is not None:
            now = time.perf_counter()
            if now >= self._next_refresh or step >= self.total:
                self._next_refresh = now + REFRESH_S
                self._bar.update(self._task, completed=step, refresh=True)

    def log(self, step: int, loss: float, samples_per_s: float, val_loss: float | None = None) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=step, loss=f"{loss:.4f}", tput=f"{samples_per_s:,.0f}",
                             refresh=True)
        else:
            extra = f" val_loss {val_loss:.4f}" if val_loss is not None else ""
            print(f"step {step}/{self.total} loss {loss:.4f} {samples_per_s:,.0f} samples/s{extra}",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
