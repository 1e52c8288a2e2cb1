"""SIGTERM / SIGUSR1 (what schedulers send before preemption) and SIGINT (Ctrl-C): note it, checkpoint at the
step's end, exit 0.

The handler only sets a flag, so a signal that lands mid-step or mid-save never interrupts a write.
SIGINT is taken only where it is not ignored: a process started with SIGINT ignored (`cmd &` in a script)
keeps ignoring it, as Python itself does.
More stop signals within `REPEAT_WINDOW_S` of the first are the same request: a scheduler that signals
every process of a job (Slurm at preemption) reaches a worker directly and again through torchrun's agent,
which forwards what it gets (and forwards once more if a second signal interrupts its shutdown), all
within milliseconds; before this window the second copy ended the worker at once, without its
checkpoint. A stop signal after the window restores the previous handler and re-sends itself, so an
impatient operator (or a stuck step) can still end the process. For SIGINT the window is
`INTERRUPT_WINDOW_S`: Ctrl-C pressed again a second after the first is the operator's, and raises
KeyboardInterrupt as Ctrl-C did before (no final checkpoint; the newest committed one is where the same
command resumes). After a stop's final checkpoint the handler is left installed while the process exits,
so a late copy is absorbed there too.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
REPEAT_WINDOW_S = 5.0  # later stop signals within this many seconds of the first are copies of it
INTERRUPT_WINDOW_S = 1.0  # ... but a SIGINT only within this many: a second Ctrl-C is a person's


def repeat_window(signum: int) -> float:
    """How long after the first stop signal a later `signum` is a copy of it (the same request)."""
    return INTERRUPT_WINDOW_S if signum == signal.SIGINT else REPEAT_WINDOW_S


class Preempted(SystemExit):
    """Raised after the final checkpoint of a signalled run; exit status 0 (the run can be resumed)."""


# The handlers that were there before any stride run installed its own. A run that crashes never
# uninstalls; the next run's uninstall restores these, not the crashed run's stale handler.
_ORIGINAL: dict[int, Any] = {}


class PreemptionSignal:
    def __init__(self) -> None:
        self.received: int | None = None
        self.received_at = 0.0  # time.monotonic() of the first signal
        self.repeats = 0  # copies of the first signal taken as the same request

    def install(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False  # signal handlers can only be set from the main thread
        for sig in SIGNALS:
            if sig == signal.SIGINT and signal.getsignal(sig) == signal.SIG_IGN:
                continue  # ignored (by whoever started this process, or set so in it): left so
            prev = signal.signal(sig, self._handle)
            if sig not in _ORIGINAL:
                _ORIGINAL[sig] = prev
        return True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.received is None:
            self.received, self.received_at = signum, now
        elif now - self.received_at <= repeat_window(signum):
            self.repeats += 1  # the same request again (the scheduler's copy and the agent's)
        else:
            self.uninstall()
            os.kill(os.getpid(), signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else ""

    def uninstall(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, prev in list(_ORIGINAL.items()):
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
            del _ORIGINAL[sig]
