"""Whether this process's threads get their cores: the time they spent runnable but waiting for one.

torch's intra-op threads meet at every operator, so one thread that waits for a core holds back the others: with
one of two cores taken by another process, a quick-start run went from 2,659 to 37 samples/s and nothing said so
(outside audit 21, H1). Linux counts each thread's run-queue wait (`/proc/<pid>/task/<tid>/schedstat`, field 2, ns);
its growth over the run divided by the wall time is how many threads were, on average, waiting for a core. Reading
it costs a few small files at the start and the end of a run (measured here, not sampled: no thread of its own).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stride.files.strict_json import finite_number

# average threads waiting for a core above which a run's figures are said to be of a contended host: a quarter of
# a thread (a quiet 2-core host reads 0.00-0.05 for a 2-thread run; the audit's busy core read about 1)
CONTENDED_THREADS = 0.25


def run_queue_wait_s(pid: str = "self") -> float | None:
    """Seconds all threads of the process have waited runnable for a core since they started; None off Linux."""
    total, seen = 0.0, False
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:  # a thread that ended meanwhile
            continue
        if len(fields) >= 2 and fields[1].isdigit():
            total += int(fields[1]) / 1e9
            seen = True
    return total if seen else None


@dataclass
class ContentionClock:
    """Run-queue wait over a stretch of wall time: `start()`, then `waiting_threads()`."""

    wait0: float | None = None
    t0: float = 0.0

    def start(self) -> None:
        self.wait0, self.t0 = run_queue_wait_s(), time.perf_counter()

    def waiting_threads(self) -> float | None:
        """Threads that were waiting for a core, on average, since `start()`; None where not measured."""
        now = run_queue_wait_s()
        wall = time.perf_counter() - self.t0
        if self.wait0 is None or now is None or wall <= 0:
            return None
        return max(0.0, (now - self.wait0) / wall)


def contention_note(waiting: float | None, threads: int, cores: int | None = None) -> str | None:
    """A line for the run's summary where its threads waited for cores enough to move its figures, else None. With
    more threads than the process's usable `cores` the wait is its own (review of 2026-12-06, M2), and said so."""
    if waiting is None or waiting < CONTENDED_THREADS:
        return None
    if cores is not None and threads > cores:
        return (f"on average {waiting:.2f} of this process's threads waited for a core: its {threads} torch threads "
                f"are more than the {cores} cores it may use, so they wait on each other; every figure can be many "
                f"times slow; set train.threads <= {cores}")
    # one torch thread already: fewer threads is no remedy (outside audit: the advice went to runs at 1 thread)
    fewer = "" if threads <= 1 else ", or with train.threads below the free cores (e.g. train.threads=1)"
    return (f"on average {waiting:.2f} of this process's threads ({threads} torch threads) waited for a core that "
            f"other processes held: every figure is of a contended host and can be tens of times slow; rerun on a "
            f"quiet host{fewer}")


def entry_contention(w: dict[str, Any]) -> str | None:
    """A run summary's or results entry's contention note (its figures are of a contended host, and the note says
    whose threads waited and what to do), or None: not contended, or not measured. The note's presence is the one
    test every reader makes (`stride compare`, `report`, `bench`, `plan calibrate`), never a second threshold on the
    figure: a GPU run's host threads only launch kernels, and its summary leaves the note empty whatever they waited."""
    note = w.get("contention_note")
    return note if isinstance(note, str) and note.strip() else None


def entry_waiting_threads(w: dict[str, Any]) -> float | None:
    """Threads that waited for a core, on average over the run, as the entry records them (None: not recorded)."""
    v = w.get("run_queue_waiting_threads")
    return float(v) if finite_number(v) and v >= 0 else None


# The LogRecord attribute of the run's contention warning: (note, threads waiting for a core on average or None). A
# caller that runs many Trainers in one process (`stride sweep`) knows the warning by it, not by its words.
CONTENTION_RECORD = "stride_contention"


def warn_contended(logger: logging.Logger, note: str, waiting: float | None) -> None:
    """The run's contention warning, one line on `logger`, with its note and measured wait on the record."""
    logger.warning("stride: warning: %s", note, extra={CONTENTION_RECORD: (note, waiting)})
