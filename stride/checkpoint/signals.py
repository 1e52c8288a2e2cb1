"""SIGTERM / SIGUSR1 (what schedulers send before preemption): note it, checkpoint at the step's end, exit 0.

The handler only sets a flag, so a signal that lands mid-step or mid-save never interrupts a write.
A second signal before the first is handled restores the previous handler and re-sends itself, so
an impatient operator (or a stuck step) can still end the process.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Preempted(SystemExit):
    """Raised after the final checkpoint of a signalled run; exit status 0 (the run can be resumed)."""


# The handlers that were there before any stride run installed its own. A run that crashes never
# uninstalls; the next run's uninstall restores these, not the crashed run's stale handler.
_ORIGINAL: dict[int, Any] = {}


class PreemptionSignal:
    def __init__(self) -> None:
        self.received: int | None = None

    def install(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False  # signal handlers can only be set from the main thread
        for sig in SIGNALS:
            prev = signal.signal(sig, self._handle)
            if sig not in _ORIGINAL:
                _ORIGINAL[sig] = prev
        return True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            self.uninstall()
            os.kill(os.getpid(), signum)
            return
        self.received = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else ""

    def uninstall(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, prev in list(_ORIGINAL.items()):
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
            del _ORIGINAL[sig]
