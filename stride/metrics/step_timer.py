"""Per-step time split into phases (data, forward, backward, optimizer, ... , other).

On CPU a phase boundary is a `perf_counter` read (~100 ns). On CUDA it records an event instead of
synchronising, so timing does not serialise host and device; events are resolved once per step at
`end_step`, which waits only on the step's last event. "other" is the step's wall time minus the
named phases: host overhead the phases do not cover (logging, scheduler, Python).
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch

PHASES = ("data", "forward", "backward", "optimizer")


class StepTimer:
    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.totals: dict[str, float] = defaultdict(float)  # seconds summed over timed steps
        self.step_seconds: list[float] = []  # every step's wall time, warm-up included (throughput windows)
        self.steps = 0
        self.last: dict[str, float] = {}
        self._marks: list[tuple[str, object]] = []
        self._inner: list[tuple[str, dict[str, float]]] = []
        self._t0 = 0.0

    def _stamp(self) -> object:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def start_step(self) -> None:
        self._t0 = time.perf_counter()
        self._marks = [("", self._stamp())]
        self._inner = []

    def mark(self, phase: str) -> None:
        """The phase `phase` ended now (it began at the previous mark)."""
        self._marks.append((phase, self._stamp()))

    def mark_split(self, rest: str, inner: dict[str, float]) -> None:
        """A phase ended now whose parts were timed inside it (e.g. a pipeline schedule's compute
        chunks): `inner` seconds go to their own phases, the remainder of the phase to `rest`."""
        self.mark(rest)
        self._inner.append((rest, inner))

    def end_step(self, record: bool = True) -> dict[str, float]:
        """Close the step; returns this step's phase seconds (and 'total', 'other')."""
        if self.cuda:
            last_ev = self._marks[-1][1]
            last_ev.synchronize()  # type: ignore[attr-defined]
        wall = time.perf_counter() - self._t0
        parts: dict[str, float] = defaultdict(float)
        for (_, a), (phase, b) in zip(self._marks, self._marks[1:], strict=False):
            dt = a.elapsed_time(b) / 1e3 if self.cuda else b - a  # type: ignore[attr-defined,operator]
            parts[phase] += dt
        for rest, inner in self._inner:
            for phase, dt in inner.items():
                parts[phase] += dt
                parts[rest] -= dt
            parts[rest] = max(parts[rest], 0.0)
        parts["other"] = max(wall - sum(parts.values()), 0.0)
        parts["total"] = wall
        self.last = dict(parts)
        self.step_seconds.append(wall)
        if record:
            self.steps += 1
            for k, v in parts.items():
                self.totals[k] += v
        return self.last

    def add(self, phase: str, seconds: float) -> None:
        """Time spent outside a step (e.g. a checkpoint stall), attributed to `phase`."""
        self.totals[phase] += seconds

    def mean(self) -> dict[str, float]:
        """Mean seconds per timed step for each phase, in a stable order."""
        n = max(self.steps, 1)
        keys = [*PHASES, *sorted(k for k in self.totals if k not in (*PHASES, "other", "total")), "other", "total"]
        return {k: self.totals.get(k, 0.0) / n for k in keys}
