"""A pack's per-model work on CPU threads: each thread runs whole models, one at a time, on one intra-op thread.

Why: on a CPU torch runs each op on all of its intra-op threads (OpenMP), which meet at a barrier at the
end of every parallel region; oneDNN's LSTM has one per time step. For small models the regions are short,
so the threads spend a large share of their time waiting for each other, and on a host that other jobs
load, a thread that loses its core stalls its partner at every barrier while the partner spins. The models
of a pack are independent, so a pack can use its cores the other way round: `lanes` threads (torch's
intra-op thread count: this thread and lanes - 1 helpers), each taking the next model and running it
single-threaded, with no barrier between models. Measured on the 2-core AMD EPYC host, 16 one-layer LSTMs
(hidden 64, batch 64, 64 steps) forward and backward: docs/sweep.md, "Round 3".

The models' results do not depend on the lane that ran them (every model runs on one intra-op thread), so
a pack's results are the same from run to run whatever the thread timing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")

_HELPERS: dict[str, ThreadPoolExecutor | int] = {"pool": 0, "size": 0, "pid": 0}
_LOCAL = threading.local()


def lanes(n: int, device: torch.device) -> int:
    """Threads a pack of n models' per-model work runs on: torch's intra-op threads on a CPU, 1 elsewhere."""
    return max(1, min(n, torch.get_num_threads())) if device.type == "cpu" else 1


def _helpers(k: int) -> ThreadPoolExecutor:
    pool = _HELPERS["pool"]
    forked = _HELPERS["pid"] != os.getpid()  # a forked child has the pool object but none of its threads
    if not isinstance(pool, ThreadPoolExecutor) or _HELPERS["size"] < k or forked:
        if isinstance(pool, ThreadPoolExecutor) and not forked:
            pool.shutdown(wait=True)
        pool = ThreadPoolExecutor(k, thread_name_prefix="stride-pack-lane")
        _HELPERS["pool"], _HELPERS["size"], _HELPERS["pid"] = pool, k, os.getpid()
    return pool


def _one_thread() -> None:
    """A helper's torch work runs on one intra-op thread (OpenMP's thread count is per calling thread)."""
    if not getattr(_LOCAL, "single", False):
        torch.set_num_threads(1)
        _LOCAL.single = True


def per_model(fn: Callable[[int], T], n: int, device: torch.device) -> list[T]:
    """[fn(0), ..., fn(n - 1)], spread over `lanes(n, device)` threads that each take the next model.

    `fn` must not depend on thread-local state it does not set itself (grad mode, autocast): the helpers
    start from torch's defaults.
    """
    k = lanes(n, device)
    if k == 1:
        return [fn(i) for i in range(n)]
    out: list[T | None] = [None] * n
    todo = iter(range(n))
    lock = threading.Lock()

    def lane(helper: bool) -> None:
        if helper:
            _one_thread()
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            out[i] = fn(i)

    futures = [_helpers(k - 1).submit(lane, True) for _ in range(k - 1)]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        lane(False)
    finally:
        errors = [f.exception() for f in futures]  # waits for every helper before the threads are restored
        torch.set_num_threads(before)
    for e in errors:
        if e is not None:
            raise e
    return out  # type: ignore[return-value]
