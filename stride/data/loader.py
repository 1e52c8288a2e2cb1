"""Deterministic, shardable, resumable batch loader over any window source, with background prefetch.

Why global batches: the order of an epoch is one permutation of all windows seeded by (seed, epoch);
global batch i is the i-th slice of it, and rank r of w takes the r-th of w equal parts of that slice.
The state is (epoch, global batches consumed), which does not depend on the world size, so a run
resumed on a different number of ranks re-splits exactly the windows not yet seen: none is skipped
and none repeated.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np
import torch

from stride.data.pages import thread_major_faults
from stride.data.permutation import FeistelPermutation

RANDPERM_MAX = 1 << 24  # windows; above this the epoch order is computed on demand
IDS_CHUNK = 64  # global batches whose window ids are computed together
READAHEAD = 4  # batches whose pages are requested ahead while the store is read from disk
ADVISE_FOR = 64  # batches to keep requesting after the last gather that took a major fault
FAULT_CHECK_EVERY = 4  # batches between reads of the thread's major-fault count while no hints run

Batch = tuple[torch.Tensor, torch.Tensor]


class WindowSource(Protocol):
    """Anything with a number of windows and a vectorised gather of a batch of window ids."""

    def __len__(self) -> int: ...

    def gather(self, idx: torch.Tensor) -> Batch: ...


class _End:
    pass


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def prefetched(make: Callable[[], Iterator[Any]], depth: int) -> Iterator[Any]:
    """Run `make()` in a background thread, up to `depth` items ahead of the consumer.

    torch's gather kernels release the GIL, so the next batch is built while the model runs. Closing
    the generator early stops the thread; an exception in the thread is raised in the consumer.

    Hand-off: the producer sleeps until the consumer has taken the buffer down to half of `depth`,
    then refills it in one burst; the consumer is woken only when it waits on an empty buffer. The
    previous `queue.Queue` with a 50 ms `put` timeout woke the producer after every batch (and every
    50 ms while full): 69 us of CPU a batch against 33 us for building the batch itself (quick-start
    loader, AMD EPYC, 1 thread); no polling remains.
    """
    buf: deque[Any] = deque()
    cv = threading.Condition(threading.Lock())
    state = {"stop": False, "consumer_waits": False, "producer_waits": False}
    low = depth // 2  # the producer is woken when the buffer falls to this many items

    def put(item: Any) -> bool:
        with cv:
            while len(buf) >= depth and not state["stop"]:
                state["producer_waits"] = True
                cv.wait()
                state["producer_waits"] = False
            if state["stop"]:
                return False
            buf.append(item)
            if state["consumer_waits"]:
                cv.notify_all()
            return True

    def work() -> None:
        try:
            for item in make():
                if not put(item):
                    return
            put(_End())
        except BaseException as exc:  # handed to the consumer, which re-raises it
            put(_Failed(exc))

    thread = threading.Thread(target=work, name="stride-data-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            with cv:
                while not buf:
                    state["consumer_waits"] = True
                    cv.wait()
                    state["consumer_waits"] = False
                item = buf.popleft()
                if state["producer_waits"] and len(buf) <= low:
                    cv.notify_all()
            if isinstance(item, _End):
                return
            if isinstance(item, _Failed):
                raise item.exc
            yield item
    finally:
        with cv:
            state["stop"] = True
            cv.notify_all()
        thread.join()


class ShardedLoader:
    """Global batches of `batch_size` windows from `source`; after `shard(r, w)`, rank r's B/w part of each.

    `stateful=False` (validation) yields the same batches from the start on every iteration.
    `prefetch` > 0 builds that many batches ahead in a thread; `pin_memory` pins them (CUDA only) so
    the trainer's `non_blocking` copy overlaps.
    """

    def __init__(
        self,
        source: WindowSource,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        stateful: bool = True,
        prefetch: int = 0,
        pin_memory: bool = False,
    ) -> None:
        n = len(source)
        if n == 0:
            raise ValueError("the window source has no windows")
        if drop_last and n < batch_size:
            raise ValueError(f"only {n} windows for batch size {batch_size}")
        self.source, self.batch_size = source, batch_size
        self.shuffle, self.seed, self.drop_last, self.stateful = shuffle, seed, drop_last, stateful
        self.prefetch = prefetch
        self.pin_memory = pin_memory and torch.cuda.is_available()
        self.rank, self.world_size = 0, 1
        self.epoch, self.position = 0, 0
        self._perm: tuple[int, torch.Tensor] | None = None

    def shard(self, rank: int, world_size: int) -> ShardedLoader:
        """From now on yield only rank `rank`'s part of every global batch."""
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        if self.drop_last and self.batch_size % world_size:
            raise ValueError(f"global batch size {self.batch_size} is not divisible by world size {world_size}")
        self.rank, self.world_size = rank, world_size
        return self

    def __len__(self) -> int:
        n = len(self.source)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.position = epoch, 0

    def _positions(self, epoch: int, lo: int, hi: int, n: int) -> np.ndarray:
        """Window ids at positions lo..hi of the epoch's order over the source's n windows (int64, numpy).

        Up to RANDPERM_MAX windows the order is a `torch.randperm` (4 bytes a window, kept for the
        epoch); beyond, a Feistel permutation evaluated on demand, so memory stays flat as data grows.
        numpy, not torch, between the permutation and the batches: once every IDS_CHUNK batches a bf16
        loader's batch took 300-350 us more (Intel Xeon, KVM), 1.4-1.7 us a batch, of which torch's index in
        `len(RowWindows)` 80-90 us and torch's `split` of the chunk 70 us against 57 for numpy slices, each
        after a copy had evicted the code; the chunk's step now costs 190-230 us.
        """
        if not self.shuffle:
            return np.arange(lo, hi, dtype=np.int64)
        seed = (self.seed * 1_000_003 + epoch) % 2**64  # torch seeds stop below 2**64 (data.seed may be 2**63 - 1)
        if n > RANDPERM_MAX:
            return FeistelPermutation(n, seed)(np.arange(lo, hi)).astype(np.int64, copy=False)
        if self._perm is None or self._perm[0] != seed:
            g = torch.Generator().manual_seed(seed)
            self._perm = (seed, torch.randperm(n, generator=g, dtype=torch.int32).numpy())
        return self._perm[1][lo:hi].astype(np.int64)

    def _rank_part(self, glob: Any) -> Any:
        """This rank's part of one global batch's ids (a tensor or a numpy array)."""
        n, w, r = glob.shape[0], self.world_size, self.rank
        return glob if w == 1 else glob[r * n // w : (r + 1) * n // w]

    def _batches(self, epoch: int, start: int) -> Iterator[Batch]:
        # Per batch as little Python as can be: every step after a 2-4 MiB copy finds its code and data
        # evicted from L2, so a few microseconds warm cost tens (Intel Xeon, KVM: the ids sliced out of the
        # chunk by one torch op a batch and the fault count read every batch took 14 us of a 212 us bf16
        # batch; the chunk split once and the count read every FAULT_CHECK_EVERY batches while no hints run).
        b = self.batch_size
        chunks: dict[int, list[torch.Tensor]] = {}  # this rank's window ids of IDS_CHUNK global batches
        # a source that gathers elsewhere (DeviceWindows) takes each chunk's ids there in one copy, not a
        # copy a batch: on an H200 the per-batch copy of the ids was a third of a 4096-window gather
        stage = getattr(self.source, "stage_ids", None)
        n_src = len(self.source)

        def ids(i: int) -> torch.Tensor:
            c = i // IDS_CHUNK
            views = chunks.get(c)
            if views is None:
                for old in [k for k in chunks if k < c - 1]:
                    del chunks[old]
                glob = self._positions(epoch, c * IDS_CHUNK * b, min(n_src, (c + 1) * IDS_CHUNK * b), n_src)
                if stage is not None:
                    views = [self._rank_part(v) for v in stage(torch.from_numpy(glob)).split(b)]
                else:
                    views = [torch.from_numpy(self._rank_part(glob[a : a + b])) for a in range(0, len(glob), b)]
                chunks[c] = views
            return views[i - c * IDS_CHUNK]

        # Page hints for stores on disk (pages.py): while gathers take major faults (the store is not
        # in the page cache), ask the kernel to start reading the windows of the next READAHEAD
        # batches, so the disk serves many reads at once; with the store cached, nothing is asked.
        will_need = getattr(self.source, "will_need", None)
        advised_to, advise_until = start, -1
        faults = thread_major_faults() if will_need is not None else 0
        n, gather, pin = len(self), self.source.gather, self.pin_memory
        for i in range(start, n):
            if will_need is not None and i <= advise_until:
                for j in range(max(advised_to, i + 1), min(n, i + 1 + READAHEAD)):
                    will_need(ids(j))
                advised_to = max(advised_to, min(n, i + 1 + READAHEAD))
            x, y = gather(ids(i))
            if will_need is not None and (i <= advise_until or not i % FAULT_CHECK_EVERY):
                now = thread_major_faults()
                if now > faults:
                    advise_until = i + ADVISE_FOR
                faults = now
            if pin:
                x, y = x.pin_memory(), y.pin_memory()
            yield x, y

    def __iter__(self) -> Iterator[Batch]:
        epoch, start = (self.epoch, self.position) if self.stateful else (0, 0)

        def make() -> Iterator[Batch]:
            return self._batches(epoch, start)

        it = prefetched(make, self.prefetch) if self.prefetch > 0 else make()
        try:
            for batch in it:
                if self.stateful:
                    self.position += 1  # counted when handed over, not when prefetched
                yield batch
        finally:
            if hasattr(it, "close"):
                it.close()
        if self.stateful:
            self.epoch, self.position = self.epoch + 1, 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed,
                "n_windows": len(self.source), "batch_size": self.batch_size}

    def load_state_dict(self, state: dict[str, int]) -> None:
        for key in ("n_windows", "batch_size"):
            mine = len(self.source) if key == "n_windows" else self.batch_size
            if key in state and int(state[key]) != mine:
                raise ValueError(
                    f"loader state was saved with {key}={state[key]} but this loader has {mine}: "
                    "resume needs the same data and global batch size"
                )
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position <= len(self):  # a position past the epoch resumed silently (audit 14, L10)
            raise ValueError(f"loader state epoch {epoch}, position {position} is outside this loader's epochs of "
                             f"{len(self)} batches")
        self.epoch, self.position, self.seed = epoch, position, int(state["seed"])
