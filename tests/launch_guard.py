"""A time limit for a `stride train --nproc N` launch that a test runs in its own process (`main([...])`).

Running the launcher in the test's process spares it a `python -m stride` process: its start-up (torch and stride
imported, the layout checked on the meta device) and its interpreter exit, about 5 s a launch on 2 busy cores. What
the timeout of `subprocess.run` gave, this keeps: a hung torchrun or rank fails the test instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator


def descendants(pid: int) -> list[int]:
    """The live processes below `pid` (its children, theirs, ...), from /proc: torchrun's ranks are in sessions of
    their own, but still its children."""
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@contextlib.contextmanager
def children_killed_after(timeout: float) -> Iterator[None]:
    """For a launch this process runs itself (`main(["train", ..., "--nproc", "2"])`, which spares the test a launcher
    process: its start-up, importing torch, and its exit, seconds each on 2 cores): past `timeout` seconds every
    process below this one is killed, so that a hung torchrun or rank fails the test (the launch returns torchrun's
    failure) as the timeout of a launcher run by subprocess.run did, instead of hanging the suite."""
    done = threading.Event()

    def watch() -> None:
        if not done.wait(timeout):
            for pid in descendants(os.getpid()):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
