"""What a sweep shows while it runs: the sweep's progress and each variant's steps, with ETAs.

On a terminal: two rich bars, the sweep (variants done of planned; ETA from each workload's measured
seconds per step, or for a workload not run yet the mean time of a finished variant) and the running
variant (its training steps, ETA from its own pace). In a
log or CI (no terminal): one line when a variant starts and ends, and a line every `heartbeat_s`
seconds while it runs, so a long sweep never goes quiet.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from stride.bench.stop import StopRequest
from stride.shown_text import literal, plain
from stride.train.callbacks import Callback


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else (f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s")


class StepReporter(Callback):
    """Trainer callback: reports each finished step of the running variant to the sweep's display."""

    def __init__(self, progress: SweepProgress, offset: int, stop: StopRequest | None = None) -> None:
        self.progress = progress
        self.offset = offset  # steps of earlier runs of the same variant (tradeoffs run each twice)
        self.stop = stop

    def on_step_end(self, trainer: Any) -> None:
        self.progress.step(self.offset + trainer.step)
        if self.stop is not None:
            self.stop.check()  # a stop signal ends the variant here, between steps (stride.bench.stop)


class SweepProgress:
    def __init__(self, planned: list[tuple[str, int]], console: Console | None = None, live: bool | None = None,
                 heartbeat_s: float = 30.0) -> None:
        """`planned`: (variant name, steps it will run) in order."""
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal if live is None else live
        self.steps = dict(planned)
        self.order = [n for n, _ in planned]
        self.heartbeat_s = heartbeat_s
        self.done: list[str] = []
        self.measured_s = 0.0  # wall seconds of variants run in this process
        self.pace: dict[str, float] = {}  # workload -> seconds per planned step, from its last variant run here
        self.pace_runs: list[str] = []
        self._current: str | None = None
        self._t0 = self._last_beat = 0.0
        self._step = 0
        self._bar: Progress | None = None
        if self.live:
            # variant names and notes are text, not markup (`lstm[bs=64]` stays whole: stride.shown_text)
            self._bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[note]}", markup=False),
                                 console=self.console, refresh_per_second=4)
            self._sweep = self._bar.add_task("sweep", total=len(planned), note="")
            self._variant: TaskID | None = None
            self._bar.start()

    def eta_s(self) -> float | None:
        """Seconds left for the variants not yet finished: a workload measured here before at its seconds per
        step, another at the mean seconds of the variants finished here (workloads differ 10x per step)."""
        if not self.pace:
            return None
        mean = self.measured_s / len(self.pace_runs)
        left = 0.0
        for n in self.order:
            if n in self.done:
                continue
            pace = self.pace.get(n.split("+")[0])
            left += pace * self.steps[n] if pace is not None else mean
            if n == self._current and pace is not None:
                left -= pace * self._step
        return max(left, 0.0)

    def _eta_text(self) -> str:
        return "sweep done" if len(self.done) == len(self.order) else f"sweep ETA {fmt_duration(self.eta_s())}"

    def _line(self, text: str) -> None:
        """One line of progress: its names (and a resumed results.json's units) shown as written."""
        if self._bar is not None:
            self._bar.console.print(literal(text))
        else:
            self.console.print(literal(text), soft_wrap=True)

    def skip(self, name: str, entry: dict[str, Any]) -> None:
        """A variant already measured with the same config (a resumed sweep): not run again."""
        self.done.append(name)
        t = entry["throughput"]
        self._line(f"[{len(self.done)}/{len(self.order)}] {name}: already in results.json with the same config, "
                   f"kept ({_tput(t)})")
        if self._bar is not None:
            self._bar.update(self._sweep, completed=len(self.done))

    def start(self, name: str, runs: int = 1) -> None:
        self._current, self._step = name, 0
        self._t0 = self._last_beat = time.perf_counter()
        k = len(self.done) + 1
        if self._bar is not None:
            if self._variant is not None:
                self._bar.remove_task(self._variant)
            self._variant = self._bar.add_task(f"  {plain(name)}", total=self.steps[name] or None, note="")
            self._bar.update(self._sweep, description=f"sweep {k}/{len(self.order)}", note=self._eta_text())
        else:
            runs_txt = f", {runs} runs" if runs > 1 else ""
            self._line(f"[{k}/{len(self.order)}] {name}: {self.steps[name]} steps{runs_txt} ...; {self._eta_text()}")

    def step(self, completed: int) -> None:
        self._step = completed
        now = time.perf_counter()
        total = self.steps[self._current or ""]
        left = (total - completed) * (now - self._t0) / completed if completed else None
        if self._bar is not None and self._variant is not None:
            if now - self._last_beat >= 0.25:  # the bar redraws 4 times a second
                self._last_beat = now
                self._bar.update(self._variant, completed=completed, note=f"ETA {fmt_duration(left)}")
                self._bar.update(self._sweep, note=self._eta_text())
            return
        if now - self._last_beat >= self.heartbeat_s:
            self._last_beat = now
            self._line(f"  {self._current}: step {completed}/{total}, {fmt_duration(now - self._t0)} so far, "
                       f"ETA {fmt_duration(left)}")

    def finish(self, name: str, entry: dict[str, Any]) -> None:
        seconds = time.perf_counter() - self._t0
        self.measured_s += seconds
        self.pace[name.split("+")[0]] = seconds / max(self.steps[name], 1)
        self.pace_runs.append(name)
        self._step = 0
        self.done.append(name)
        msg = (f"[{len(self.done)}/{len(self.order)}] {name} done in {fmt_duration(seconds)} "
               f"({_tput(entry['throughput'])}); results.json updated; {self._eta_text()}")
        if self._bar is not None:
            self._bar.update(self._sweep, completed=len(self.done), note=self._eta_text())
        self._line(msg)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _tput(t: dict[str, Any]) -> str:
    return f"{t['median']:,.0f} {t['unit']}" if t.get("median") else "no throughput"
