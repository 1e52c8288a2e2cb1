"""Whether an entry's figures are of a contended host, as its run said (`stride.metrics.contention`).

A run on a CPU writes `contention_note` into its summary where its threads waited for cores enough to move its
figures (`contention_note`: at least CONTENDED_THREADS threads on average), and `run_queue_waiting_threads`, the
measured wait. `stride bench` copies both into each results entry and `stride compare` / `stride report` read a
`stride train` run's summary the same way (stride.report.inputs), so one test serves every input: the
note's presence (stride.metrics.contention.entry_contention, which `stride plan calibrate` reads too).
"""

from __future__ import annotations

from typing import Any

from stride.metrics.contention import entry_contention, entry_waiting_threads


def contended_verdict(sides: dict[str, dict[str, Any]]) -> str | None:
    """The verdict of a comparison where one or both `sides` ({"A": entry, "B": entry}) ran on a contended host, or
    None where neither did. Such a figure can be tens of times slow whatever its spread (audit 21, H1: 500x slow at a
    1.4 % cv), so a ratio with it in says nothing of the change under test: no faster / slower / within noise."""
    busy = [side for side, w in sides.items() if entry_contention(w)]
    if not busy:
        return None
    figures = [f"{side} {v:.2f}" for side in busy if (v := entry_waiting_threads(sides[side])) is not None]
    how = (f"threads waiting for a core on average: {', '.join(figures)}" if len(figures) == len(busy)
           else f"{' and '.join(busy)}: {'its' if len(busy) == 1 else 'their'} threads waited for cores")
    return f"no verdict: the host was busy ({how}); rerun on a quiet host"
