"""The analysed span of each profiler step, on the device's own timeline.

A GPU runs behind the host, so a step's device window is not the host's `ProfilerStep` interval: it
runs from the later of the step's host start and the end of the previous step's device work, to the
later of the step's host end and the end of its last kernel (kernels are assigned to the step whose
host interval contains their launch). Windows are disjoint and tile the device timeline, so idle time
while the device waits for the next step's input lands in that next step. On CPU-only traces the
window is the step's host interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stride.profile.activity import Activity
from stride.profile.trace_model import RankTrace


@dataclass
class Window:
    step: int | None  # profiler step number; None for a trace without steps
    start: float
    end: float

    @property
    def span(self) -> float:
        return max(self.end - self.start, 0.0)


def step_windows(t: RankTrace, act: Activity) -> list[Window]:
    if not t.steps:
        if len(act.ev_ts) == 0:
            return []
        return [Window(None, float(act.ev_ts.min()), float(act.ev_end.max()))]
    if not act.on_gpu:
        return [Window(s.number, s.ts, s.end) for s in t.steps]
    launch = np.where(np.isnan(act.ev_launch), act.ev_ts, act.ev_launch)
    starts = np.array([s.ts for s in t.steps])
    ends = np.array([s.end for s in t.steps])
    idx = np.searchsorted(starts, launch, side="right") - 1
    inside = (idx >= 0) & (launch < ends[np.maximum(idx, 0)])
    out: list[Window] = []
    prev_end = -np.inf
    for k, s in enumerate(t.steps):
        mine = inside & (idx == k)
        last = float(act.ev_end[mine].max()) if mine.any() else s.end
        start = max(s.ts, prev_end)
        end = max(s.end, last)
        if k + 1 < len(t.steps):
            end = max(min(end, max(t.steps[k + 1].ts, last)), start)
        out.append(Window(s.number, start, end))
        prev_end = end
    return out


def analysed_windows(t: RankTrace, act: Activity, drop_last_step: bool) -> list[Window]:
    """The step windows a report covers: all of them, or (HTA's default) all but the last of two or more.
    Every figure of a rank is taken over these, so the steps it lists are the steps its numbers cover."""
    windows = step_windows(t, act)
    return windows[:-1] if drop_last_step and len(windows) >= 2 else windows
