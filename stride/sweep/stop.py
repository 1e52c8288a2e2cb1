"""Stopping `stride sweep` on SIGTERM (what batch schedulers and `timeout` send) or Ctrl-C, as `stride bench` stops.

The first signal is acknowledged on stderr at once and acted on at the next check: after a training step (a
pack's, or a point's trained alone), between packs, between the probe's pack sizes, and while the driver waits
for Ray tasks. The sweep then writes the report of the finished points and prints its stop line, exit status
130. A second signal stops at once. Before, SIGTERM ended the sweep without a line or a report (Python's
default action); only Ctrl-C got them (audit 10, F11). The handler itself only notes the signal: why an
exception raised from a handler is not safe is in stride.bench.stop, whose StopRequest this is.
"""

from __future__ import annotations

import signal
import threading

from stride.bench.stop import StopRequest, SweepStopped

__all__ = ["SweepStop", "SweepStopped", "stop_reason"]


class SweepStop(StopRequest):
    """StopRequest with the sweep's acknowledgement line."""

    acknowledgement = ("stride sweep: {name} received; stopping at the end of this step, keeping the finished points "
                       "(send it again to stop now)\n")

    def retake(self) -> None:
        """Take the signals back after a library set its own handler (`ray.init` sets SIGTERM to `sys.exit`, which
        ended a Ray sweep without its stop line); leaving the block still restores the handlers from before it."""
        if threading.current_thread() is threading.main_thread():
            for sig in self._previous:
                signal.signal(sig, self._handle)


def stop_reason(exc: BaseException) -> str:
    """What the stop line says stopped the sweep: "interrupted" for Ctrl-C (as before), else the signal's name."""
    name = exc.args[0] if isinstance(exc, SweepStopped) and exc.args else None
    return "interrupted" if name in (None, "SIGINT") else str(name)
