"""Stopping a bench sweep on SIGTERM (a scheduler's stop, `kill`) or Ctrl-C: at the end of a step or between
variants, not wherever the signal lands.

The handler only notes the signal; `StopRequest.check`, called by the step reporter after every training step
and by the sweep before each variant, raises `SweepStopped`. A second signal raises at once (a stuck step, an
impatient operator).

Why not raise from the handler (it did, until 2026-12-05): an exception raised at an arbitrary bytecode lands
inside whatever library code runs then. SIGTERM sent at random times to a 3-variant sweep (Intel Xeon, 2 cores;
18 stops that landed after the handler was set) showed two ways this goes wrong: twice the process printed its
stop message, then killed itself with SIGINT at exit (rc -2, not 130: CPython 3.11 marks a plain KeyboardInterrupt
raised while code runs through `PyRun_String` as unhandled even when it is caught, and ends the process with
SIGINT however it exits); and one CI run exited 130 without the stop message (an exception landing inside rich's
console bookkeeping can leave its output buffered, never written). `SweepStopped` subclasses KeyboardInterrupt
so code that treats Ctrl-C as a stop (the trackers mark such runs stopped, not failed) still does; CPython's
check is for the exact type.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any


class SweepStopped(KeyboardInterrupt):
    """A stop signal reached the sweep; args[0] names it (SIGTERM, SIGINT)."""


class StopRequest:
    """The first SIGTERM / SIGINT is noted and acted on at the next `check`; the next one raises at once."""

    # the line the first signal gets at once, on stderr ({name}: the signal's)
    acknowledgement = ("stride bench: {name} received; stopping at the end of this step or before the next run "
                       "(send it again to stop now)\n")

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def check(self) -> None:
        if self.received is not None:
            raise SweepStopped(self.received)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.received is None:
            self.received = name
            # said now, not at the step's end (a long step left the operator without a word); os.write, not
            # print: the handler may run inside rich's or print's own buffered write (see above)
            with contextlib.suppress(OSError):
                os.write(2, self.acknowledgement.format(name=name).encode())
            return
        self._restore()
        raise SweepStopped(name)

    def _restore(self) -> None:
        for sig, prev in self._previous.items():
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        self._previous.clear()

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopRequest]:
        """Take SIGTERM and SIGINT for the block (SIGINT only where it is not ignored, as Python itself does; only
        from the main thread, where signal handlers can be set: elsewhere nothing is taken)."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                if sig == signal.SIGINT and signal.getsignal(sig) == signal.SIG_IGN:
                    continue
                self._previous[sig] = signal.signal(sig, self._handle)
        try:
            yield self
        finally:
            self._restore()
