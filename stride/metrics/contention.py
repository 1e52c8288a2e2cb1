"""Whether this process's threads get their cores: the time they spent runnable but waiting for one.

torch's intra-op threads meet at every operator, so one thread that waits for a core holds back the others: with
one of two cores taken by another process, a quick-start run went from 2,659 to 37 samples/s and nothing said so
(outside audit 21, H1). Linux counts each thread's run-queue wait (`/proc/<pid>/task/<tid>/schedstat`, field 2, ns);
its growth over the run divided by the wall time is how many threads were, on average, waiting for a core. Reading
it costs a few small files at the start and the end of a run (measured here, not sampled: no thread of its own).

Not all of that wait is other processes': a process's own threads wait on each other too. A rank of `stride train
--nproc 2` pinned to one core (1 torch thread) on a quiet 2-core host (AMD EPYC, family 26 model 2; quick-start model)
read 0.10-0.12 threads waiting at batch 64 and 0.34-0.43 at batch 8, with no other process on its core: gloo's two
`pt_gloo_runloop` threads (0.12 each at batch 8) and four `gloo_tcp_loop` threads wake for a little work each
collective and wait for the main thread's time slice, and the main thread (0.06-0.12) for theirs. So a wait is put on
other processes only as far as they used this process's cores (`OtherProcessesClock`: the time the cores of its
affinity were not idle, `/proc/stat`, less the CPU time of this process and of the run's other processes there): that
rank read 0.00-0.01 cores of others; beside a busy process on its core 0.48, and a 2-thread run 0.72. The part of the
wait other processes can have caused is at most what they used: min(wait, their cores), `foreign_wait`.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stride.files.strict_json import finite_number

# average threads waiting for a core above which a run's figures are said to be of a contended host: a quarter of
# a thread (a quiet 2-core host reads 0.00-0.05 for a 2-thread run; the audit's busy core read about 1). Where the
# cores' busy time is read, the wait counted is at most the cores' worth other processes used (`foreign_wait`): a
# pinned gloo rank's own threads wait 0.10-0.43 on a quiet host
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


def _affinity() -> frozenset[int]:
    return frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()


def cores_idle_s(cores: frozenset[int]) -> float | None:
    """Seconds `cores` have run no task since boot, as `/proc/stat` counts them (idle, I/O wait, and a hypervisor's
    steal, when the core did not run at all); None off Linux or where a core is not listed."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    idle: dict[int, int] = {}
    for line in lines:
        name, *fields = line.split() or [""]
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores and len(fields) >= 8:
            idle[int(name[3:])] = int(fields[3]) + int(fields[4]) + int(fields[7])
    if not cores or len(idle) != len(cores):
        return None
    return sum(idle.values()) / os.sysconf("SC_CLK_TCK")


@dataclass
class ContentionClock:
    """Run-queue wait over a stretch of wall time: `start()`, then `waiting_threads()`."""

    wait0: float | None = None
    t0: float = 0.0

    def start(self) -> None:
        self.wait0, self.t0 = run_queue_wait_s(), time.perf_counter()

    def waiting_threads(self) -> float | None:
        """Threads that were waiting for a core, on average since `start()`; None where not measured."""
        now = run_queue_wait_s()
        wall = time.perf_counter() - self.t0
        if self.wait0 is None or now is None or wall <= 0:
            return None
        return max(0.0, (now - self.wait0) / wall)


def run_processes() -> list[int]:
    """The other processes of this run on this host: this process's children (data-loader workers) and, where it is
    one of several local ranks (torchrun's LOCAL_WORLD_SIZE > 1), its launcher's other children (the other ranks)."""
    def children(pid: int) -> set[int]:
        found: set[int] = set()
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                found.update(int(c) for c in (task / "children").read_text().split())
        except (OSError, ValueError):  # no such file (a kernel without it), or a process that ended meanwhile
            pass
        return found

    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    ours = children(os.getpid()) | (children(os.getppid()) if local.isdigit() and int(local) > 1 else set())
    return sorted(ours - {os.getpid()})


def processes_cpu_s(pids: list[int], cores: frozenset[int]) -> dict[int, float]:
    """CPU seconds each of `pids` has used since it started (every thread's: `/proc/<pid>/stat` utime + stime), for
    those whose affinity lies within `cores` (their CPU time was spent on them); a process that ended is left out."""
    out: dict[int, float] = {}
    for pid in pids:
        try:
            if not os.sched_getaffinity(pid) <= cores:
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            continue
    return out


@dataclass
class OtherProcessesClock:
    """The cores' worth of CPU time other processes (not this run's) used on this process's cores over a stretch of
    wall time: `started()`, then `cores()`."""

    cores0: frozenset[int] = frozenset()  # the process's affinity at the start
    idle0: float | None = None
    cpu0: float = 0.0
    run0: dict[int, float] = field(default_factory=dict)  # this run's other processes' CPU seconds (run_processes)
    t0: float = 0.0

    @classmethod
    def started(cls) -> OtherProcessesClock:
        cores0 = _affinity()
        return cls(cores0, cores_idle_s(cores0), time.process_time(), processes_cpu_s(run_processes(), cores0),
                   time.perf_counter())

    def cores(self) -> float | None:
        """Cores' worth of CPU time other processes (and the kernel's interrupts) used on average since the start on
        the cores this process may run on: the time those cores were not idle less this process's CPU time (every
        thread's, ended ones too) and that of the run's other processes there (`run_processes`: its other local
        ranks where they share its cores, its data-loader workers, those started since counted whole). None where
        not measured, or where the affinity gained cores meanwhile."""
        idle, cpu = cores_idle_s(self.cores0), time.process_time()
        run = processes_cpu_s(sorted(set(run_processes()) | set(self.run0)), self.cores0)  # those started since: all
        wall = time.perf_counter() - self.t0
        if self.idle0 is None or idle is None or wall <= 0 or not _affinity() <= self.cores0:
            return None
        ours = cpu - self.cpu0 + sum(v - self.run0.get(p, 0.0) for p, v in run.items())
        return max(0.0, (len(self.cores0) * wall - (idle - self.idle0) - ours) / wall)


@dataclass
class WaitClock:
    """Run-queue wait (`ContentionClock`) and other processes' use of this process's cores (`OtherProcessesClock`)
    over one stretch: the two figures a busy-host verdict reads together (`foreign_wait`). One clock for a sweep's
    packs (stride.sweep.jobs) and its one-by-one rate (stride.sweep.sizing), which each started the pair themselves."""

    waits: ContentionClock
    others: OtherProcessesClock

    @classmethod
    def started(cls) -> WaitClock:
        waits = ContentionClock()
        waits.start()
        return cls(waits, OtherProcessesClock.started())

    def read(self) -> tuple[float | None, float | None]:
        """(threads that waited for a core, on average; cores' worth other processes used) since the start."""
        return self.waits.waiting_threads(), self.others.cores()


def foreign_wait(waiting: float | None, other: float | None) -> float | None:
    """The part of `waiting` (threads waiting for a core, on average) that other processes can have caused: at most
    the cores' worth they used on this process's cores (`other`); all of it where `other` was not measured."""
    if waiting is None:
        return None
    return waiting if other is None else min(waiting, other)


def contention_note(waiting: float | None, threads: int, cores: int | None = None,
                    other: float | None = None) -> str | None:
    """A line for the run's summary where its threads waited for cores enough to move its figures, else None. With
    more threads than the process's usable `cores` the wait is its own (review of 2026-12-06, M2), and said so.
    Otherwise the wait counts only as far as other processes used its cores (`other`, `OtherProcessesClock`;
    None: not measured, the whole wait counts): the rest is its own threads' (gloo's) on each other, no busy host."""
    if waiting is None or waiting < CONTENDED_THREADS:
        return None
    if cores is not None and threads > cores:
        return (f"on average {waiting:.2f} of this process's threads waited for a core: its {threads} torch threads "
                f"are more than the {cores} cores it may use, so they wait on each other; every figure can be many "
                f"times slow; set train.threads <= {cores}")
    foreign = foreign_wait(waiting, other)
    if foreign is None or foreign < CONTENDED_THREADS:
        return None
    of = "cores" if cores is None else f"{cores} core{'' if cores == 1 else 's'}"
    held = "" if other is None else f" (other processes used {other:.2f} of its {of} on average)"
    # one torch thread already: fewer threads is no remedy (outside audit: the advice went to runs at 1 thread)
    fewer = "" if threads <= 1 else ", or with train.threads below the free cores (e.g. train.threads=1)"
    return (f"on average {waiting:.2f} of this process's threads ({threads} torch threads) waited for a core that "
            f"other processes held{held}: every figure is of a contended host and can be tens of times slow; rerun "
            f"on a quiet host{fewer}")


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
