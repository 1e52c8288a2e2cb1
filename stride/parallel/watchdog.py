"""Collective watchdog: a hung collective ends the process with one line naming rank, operation and step.

When one rank stops taking part (stuck in a kernel, a debugger, a dead NFS mount, SIGSTOP), the
others block in their next collective. torch's own timeout (`init_process_group(timeout=...)`)
eventually raises or aborts, but its message names a gloo buffer or an NCCL sequence number, not
the training step, and a collective waited on from a thread torch does not watch can block forever.

stride labels the places where ranks communicate (`with collective("loss all-reduce"): ...`):
forward/backward under DDP/FSDP/TP, the loss mean, the grad-norm and step-guard all-reduces, and
every checkpoint barrier, write and vote. A daemon thread checks the labels once per poll period;
when one has been open longer than `parallel.collective_timeout_s` it prints

    stride watchdog: rank 1 waited 10.3 s in "forward/backward (DDP gradient all-reduce)" at step 8 ...

and ends the process with exit status 124 (`os._exit`: the blocked thread cannot be unwound), so
torchrun's agent restarts the job (`--max-restarts`) or fails it, instead of a silent hang.

torch's own timeout is set a margin longer (`backend_timeout`), so for a labelled operation stride's
message comes first; torch's stays the backstop for collectives stride does not label.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

EXIT_CODE = 124  # as coreutils `timeout`: ended because something took too long


@dataclass
class Op:
    name: str
    step: int | None
    t0: float  # time.monotonic() when it began


def backend_margin_s(timeout_s: float) -> float:
    """How much later torch's own timeout fires than stride's (so stride's message, naming the op, wins)."""
    return max(5.0, 0.1 * timeout_s)


class CollectiveWatchdog:
    """Tracks the labelled operation each thread is in; ends the process when one outlives `timeout_s`."""

    def __init__(self, timeout_s: float, rank: int, *, poll_s: float | None = None,
                 on_expire: Callable[[str], None] | None = None) -> None:
        self.timeout_s, self.rank = float(timeout_s), rank
        self.poll_s = poll_s if poll_s is not None else min(1.0, max(0.05, self.timeout_s / 10))
        self.on_expire = on_expire or _print_and_exit
        self.step: int | None = None  # the training step the main loop is in (set by the trainer)
        self._ops: dict[int, list[Op]] = {}  # thread ident -> stack of open operations
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.expired: str | None = None  # the message, once fired

    @contextlib.contextmanager
    def op(self, name: str, step: int | None = None) -> Iterator[None]:
        me = threading.get_ident()
        entry = Op(name, self.step if step is None else step, time.monotonic())
        with self._lock:
            self._ops.setdefault(me, []).append(entry)
        self._ensure_thread()
        try:
            yield
        finally:
            with self._lock:
                stack = self._ops.get(me, [])
                if entry in stack:
                    stack.remove(entry)
                if not stack:
                    self._ops.pop(me, None)

    def message(self, op: Op, elapsed: float) -> str:
        where = f"at step {op.step}" if op.step is not None else "before the first step"
        return (f"stride watchdog: rank {self.rank} waited {elapsed:.1f} s in \"{op.name}\" {where} "
                f"(limit parallel.collective_timeout_s = {self.timeout_s:g}): another rank stopped taking part "
                f"(hung, stopped or dead); ending this process with exit status {EXIT_CODE}")

    def check(self, now: float | None = None) -> str | None:
        """Fire on the oldest overdue operation, if any; returns the message it fired with."""
        now = time.monotonic() if now is None else now
        with self._lock:
            open_ops = [op for stack in self._ops.values() for op in stack[-1:]]  # innermost per thread
        overdue = [op for op in open_ops if now - op.t0 > self.timeout_s]
        if not overdue or self.expired is not None:
            return None
        op = min(overdue, key=lambda o: o.t0)
        self.expired = self.message(op, now - op.t0)
        self.on_expire(self.expired)
        return self.expired

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="stride-watchdog", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.check()

    def close(self) -> None:
        self._stop.set()


def _print_and_exit(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
    os._exit(EXIT_CODE)


# -- the process's watchdog (one per process; Parallel installs it when there are several ranks) --
_current: CollectiveWatchdog | None = None


def install(timeout_s: float, rank: int) -> CollectiveWatchdog:
    global _current
    if _current is not None:
        _current.close()
    _current = CollectiveWatchdog(timeout_s, rank)
    return _current


def current() -> CollectiveWatchdog | None:
    return _current


def collective(name: str, step: int | None = None) -> contextlib.AbstractContextManager[None]:
    """Label a region where this rank waits on others; a no-op when no watchdog is installed."""
    return _current.op(name, step) if _current is not None else contextlib.nullcontext()


def set_step(step: int) -> None:
    if _current is not None:
        _current.step = step


def backend_timeout() -> timedelta | None:
    """The timeout to give new process groups (stride's limit plus a margin), or None for torch's default."""
    if _current is None:
        return None
    return timedelta(seconds=_current.timeout_s + backend_margin_s(_current.timeout_s))
