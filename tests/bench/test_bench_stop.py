"""A stop signal reaches a bench sweep as a note, acted on between steps; a second one stops it at once."""

from __future__ import annotations

import os
import signal

import pytest

from stride.bench.progress import StepReporter, SweepProgress
from stride.bench.stop import StopRequest, SweepStopped


def _signal_self(sig: int) -> None:
    os.kill(os.getpid(), sig)  # the Python-level handler runs at the next bytecode boundary of this thread


def test_first_signal_is_noted_not_raised_and_the_check_raises(capfd: pytest.CaptureFixture[str]) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with StopRequest().installed() as stop:
        _signal_self(signal.SIGTERM)
        for _ in range(1000):  # the Python-level handler runs between bytecodes: nothing is raised here
            pass
        assert stop.received == "SIGTERM"
        # the operator hears at once that the stop was taken, and how to stop now
        said = capfd.readouterr().err
        assert ("SIGTERM received; stopping at the end of this step or before the next run "
                "(send it again to stop now)") in said
        with pytest.raises(SweepStopped, match="SIGTERM") as info:
            stop.check()
        assert isinstance(info.value, KeyboardInterrupt)  # callers' Ctrl-C handling still applies
        assert type(info.value) is not KeyboardInterrupt  # ... but not CPython's exact-type check (stride.bench.stop)
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_second_signal_raises_at_once_and_restores_the_handlers() -> None:
    before = signal.getsignal(signal.SIGINT)
    stop = StopRequest()
    with pytest.raises(SweepStopped, match="SIGINT"), stop.installed():
        _signal_self(signal.SIGTERM)
        for _ in range(1000):
            pass
        _signal_self(signal.SIGINT)
        for _ in range(10_000_000):  # the second signal ends this loop
            pass
        pytest.fail("the second signal did not stop the block")
    assert signal.getsignal(signal.SIGINT) == before


def test_an_ignored_sigint_stays_ignored() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopRequest().installed():
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_step_reporter_stops_the_run_at_a_step_end() -> None:
    progress = SweepProgress([("mlp_tiny+baseline", 10)], live=False)
    stop = StopRequest()
    reporter = StepReporter(progress, 0, stop)

    class _Trainer:
        step = 3

    progress.start("mlp_tiny+baseline")
    reporter.on_step_end(_Trainer())  # no signal: the step is reported and the run goes on
    stop.received = "SIGTERM"
    with pytest.raises(SweepStopped, match="SIGTERM"):
        reporter.on_step_end(_Trainer())


def test_ppo_stops_after_the_update_that_saw_the_signal() -> None:
    """PPO runs its own loop, not the Trainer's: the stop was checked only between variants, so a scheduler's
    SIGTERM waited for the whole PPO run (the session's review). It is checked after every update now."""
    from stride.bench.runner import run_workload
    from stride.bench.workloads import WORKLOADS

    stop = StopRequest()
    stop.received = "SIGTERM"
    updates: list[int] = []

    def check() -> None:
        updates.append(1)
        stop.check()

    with pytest.raises(SweepStopped, match="SIGTERM"):
        run_workload(WORKLOADS["ppo_market_making"], "cpu", None, after_update=check)
    assert updates == [1]
