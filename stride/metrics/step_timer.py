"""Per-step time split into phases (data, forward, backward, optimizer, ... , other).

On CPU a phase boundary is one `perf_counter` read (~100 ns). On CUDA it records an event instead of
synchronising, so timing does not serialise host and device. Events are resolved later, not at every
step: `end_step(resolve=False)` keeps the step's events pending and the host runs on into the next
step (the step timer used to wait on every step's last event: one host sync a step); the trainer
resolves at log steps, where it reads the loss anyway, so a run synchronises once per `log_every`
steps. A resolving step waits for its last event (which completes every earlier one on the stream),
then turns each pending step's events into seconds. Pending steps are capped (`MAX_PENDING`).

"other" is the step's wall time minus the named phases: host overhead the phases do not cover
(logging, scheduler, Python). With deferred CUDA steps a step's host wall time is its dispatch time
and the resolving step's includes the wait for the queued work, so per-step walls shift between
steps while their sum (and every total and mean below) is the elapsed time.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch

PHASES = ("data", "forward", "backward", "optimizer")
MAX_PENDING = 256  # deferred CUDA steps (6 events each) before one is resolved regardless


class StepTimer:
    def __init__(self, device: torch.device, defer: bool | None = None) -> None:
        """`defer`: keep steps pending until a resolving `end_step` (default: on CUDA only; CPU stamps
        are final when taken, so deferring them only delays the figures)."""
        self.cuda = device.type == "cuda"
        self.defer = self.cuda if defer is None else defer
        self.totals: dict[str, float] = defaultdict(float)  # seconds summed over timed steps
        self.step_seconds: list[float] = []  # every step's wall time, warm-up included (throughput windows)
        self.steps = 0
        self.last: dict[str, float] = {}  # the last resolved step's phases (the mean of the steps resolved together)
        self._marks: list[tuple[str, object]] = []
        self._inner: list[tuple[str, dict[str, float]]] = []
        self._pending: list[tuple[list[tuple[str, object]], list[tuple[str, dict[str, float]]], float, bool]] = []
        self._t0 = 0.0
        self._last_recorded = False  # whether the last ended step is booked (an `add` after it is, too)

    def _stamp(self) -> object:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def start_step(self) -> None:
        self._t0 = t = time.perf_counter()
        self._marks = [("", self._stamp() if self.cuda else t)]
        self._inner = []

    def mark(self, phase: str) -> None:
        """The phase `phase` ended now (it began at the previous mark)."""
        self._marks.append((phase, self._stamp() if self.cuda else time.perf_counter()))

    def mark_split(self, rest: str, inner: dict[str, float]) -> None:
        """A phase ended now whose parts were timed inside it (e.g. a pipeline schedule's compute
        chunks): `inner` seconds go to their own phases, the remainder of the phase to `rest`."""
        self.mark(rest)
        self._inner.append((rest, inner))

    def end_step(self, record: bool = True, resolve: bool = True) -> dict[str, float]:
        """Close the step. Resolving (always, unless deferring): wait for the step's last event, book
        every pending step and return their mean phase seconds (with 'total' and 'other'; this step's
        alone when nothing was pending). Not resolving: keep the step pending and return `last`."""
        self._last_recorded = record
        if not self.cuda and not self.defer and not self._pending:  # CPU stamps are final: book it now
            wall = time.perf_counter() - self._t0
            self.step_seconds.append(wall)
            self.last = self._book(self._marks, self._inner, wall, record)
            return self.last
        resolve = resolve or not self.defer or len(self._pending) >= MAX_PENDING
        if resolve and self.cuda:
            self._marks[-1][1].synchronize()  # type: ignore[attr-defined]
        wall = time.perf_counter() - self._t0
        self.step_seconds.append(wall)
        self._pending.append((self._marks, self._inner, wall, record))
        if resolve:
            self._book_pending()
        return self.last

    def _book_pending(self) -> None:
        """Book every pending step; `last` becomes their mean (one step when nothing was deferred)."""
        booked = [self._book(*p) for p in self._pending]
        self._pending = []
        if len(booked) == 1:
            self.last = booked[0]
        elif booked:
            self.last = {k: sum(b.get(k, 0.0) for b in booked) / len(booked) for k in booked[-1]}

    def _book(self, marks: list[tuple[str, object]], inner: list[tuple[str, dict[str, float]]], wall: float,
              record: bool) -> dict[str, float]:
        parts: dict[str, float] = {}
        prev = marks[0][1]
        for phase, stamp in marks[1:]:
            dt = prev.elapsed_time(stamp) / 1e3 if self.cuda else stamp - prev  # type: ignore[attr-defined,operator]
            parts[phase] = parts.get(phase, 0.0) + dt
            prev = stamp
        for rest, split in inner:
            for phase, dt in split.items():
                parts[phase] = parts.get(phase, 0.0) + dt
                parts[rest] -= dt
            parts[rest] = max(parts[rest], 0.0)
        parts["other"] = max(wall - sum(parts.values()), 0.0)
        parts["total"] = wall
        if record:
            self.steps += 1
            totals = self.totals
            for k, v in parts.items():
                totals[k] += v
        return parts

    def flush(self) -> None:
        """Book every pending step (end of a run, or before reading `totals`/`mean`)."""
        if self._pending:
            if self.cuda:
                self._pending[-1][0][-1][1].synchronize()  # type: ignore[attr-defined]
            self._book_pending()

    def add(self, phase: str, seconds: float) -> None:
        """Time spent outside a step (e.g. a checkpoint stall after it), attributed to `phase` and to the
        step's total, so the breakdown's parts sum to the step time and throughput counts the stall (before,
        a checkpointing run's parts summed to 107 % of the step time). After a warm-up step, whose own time
        is not booked, nothing is booked either."""
        if self.step_seconds:  # the throughput windows read these walls: the stall is the step's, there too
            self.step_seconds[-1] += seconds
        if self._last_recorded:
            self.totals[phase] += seconds
            self.totals["total"] += seconds

    def mean(self) -> dict[str, float]:
        """Mean seconds per timed step for each phase, in a stable order."""
        self.flush()
        n = max(self.steps, 1)
        keys = [*PHASES, *sorted(k for k in self.totals if k not in (*PHASES, "other", "total")), "other", "total"]
        return {k: self.totals.get(k, 0.0) / n for k in keys}
