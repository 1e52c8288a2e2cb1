"""The collective watchdog in one process: which operation it names, when it fires, and that it stays quiet."""

from __future__ import annotations

import threading
import time

import pytest

from stride.config import ConfigError, load_config
from stride.parallel import watchdog
from stride.parallel.watchdog import CollectiveWatchdog


def test_names_rank_operation_step_and_elapsed_of_the_overdue_operation() -> None:
    fired: list[str] = []
    wd = CollectiveWatchdog(10.0, rank=3, on_expire=fired.append)
    wd.step = 42
    with wd.op("loss all-reduce (mean over ranks)"):
        t0 = time.monotonic()
        assert wd.check(now=t0 + 9.0) is None  # within the limit: nothing
        msg = wd.check(now=t0 + 12.5)
    assert fired == [msg]
    assert msg.startswith('stride watchdog: rank 3 waited 12.5 s in "loss all-reduce (mean over ranks)" at step 42 ')
    assert "parallel.collective_timeout_s = 10" in msg and "exit status 124" in msg
    assert wd.check(now=t0 + 99) is None  # fires once


def test_innermost_operation_of_each_thread_and_an_explicit_step() -> None:
    fired: list[str] = []
    wd = CollectiveWatchdog(1.0, rank=0, on_expire=fired.append)
    wd.step = 7
    release = threading.Event()
    entered = threading.Event()

    def background() -> None:
        with wd.op("checkpoint write (DCP async save, in the background)", step=5):
            entered.set()
            release.wait(10)

    th = threading.Thread(target=background)
    th.start()
    entered.wait(10)
    with wd.op("checkpoint save (outer)"), wd.op("checkpoint barrier (before the save)"):
        now = time.monotonic()
        # both threads are overdue: the oldest operation is named, the background write at its own step
        msg = wd.check(now=now + 5)
    release.set()
    th.join()
    assert msg is not None and '"checkpoint write (DCP async save, in the background)" at step 5' in msg
    assert wd._ops == {}  # every operation closed  # noqa: SLF001


def test_closed_operations_never_fire_and_the_thread_fires_on_time() -> None:
    fired: list[tuple[float, str]] = []
    wd = CollectiveWatchdog(0.4, rank=1, poll_s=0.02, on_expire=lambda m: fired.append((time.monotonic(), m)))
    for _ in range(20):  # many short operations, each well within the limit
        with wd.op("forward/backward (DDP gradient all-reduce)"):
            time.sleep(0.01)
    time.sleep(0.6)
    assert fired == []
    t0 = time.monotonic()
    with wd.op("gradient-norm all-reduce"):
        while not fired and time.monotonic() - t0 < 10:
            time.sleep(0.01)
    wd.close()
    assert len(fired) == 1 and '"gradient-norm all-reduce"' in fired[0][1]
    assert 0.4 <= fired[0][0] - t0 <= 0.4 + 2.0  # limit + poll + scheduling slack on a shared machine


def test_without_a_watchdog_labels_are_free_and_the_backend_keeps_its_default() -> None:
    saved = watchdog._current  # noqa: SLF001
    watchdog._current = None  # noqa: SLF001
    try:
        with watchdog.collective("anything"):
            pass
        assert watchdog.backend_timeout() is None
        wd = watchdog.install(30.0, rank=0)
        assert watchdog.backend_timeout().total_seconds() == 35.0  # stride's limit first, torch's 5 s later
        wd.close()
    finally:
        watchdog._current = saved  # noqa: SLF001


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ConfigError, match=r"`parallel.collective_timeout_s` = 0(\.0)? must be > 0"):
        load_config(overrides=["parallel.collective_timeout_s=0"])
