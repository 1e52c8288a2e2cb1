"""The benchmarked collectives: buffers, the call, the expected result, and nccl-tests' bus factor.

Sizes follow nccl-tests: `nbytes` is the per-rank send buffer for all_reduce, broadcast, all_to_all
and send/recv, the gathered output for all_gather, and the input for reduce_scatter. The element count
shown beside it is nccl-tests' `count` too (the count argument of the call, its `paramcount`): the
whole buffer for all_reduce, broadcast and send/recv, but one rank's share where the buffer is split
over the ranks: the per-rank input of all_gather, the per-rank output of reduce_scatter, the chunk sent
to each peer by all_to_all (nccl-tests' all_gather.cu, reduce_scatter.cu, alltoall.cu). Bus bandwidth =
algorithm bandwidth x factor(n): all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n;
broadcast and send/recv 1. Each collective's check fills ranks with distinct small integers (exact
in float32) and compares the result element by element with what the collective must produce.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

DTYPE = torch.float32
ELEM = 4  # bytes of one float32


def _pattern(count: int, rank: int) -> torch.Tensor:
    """Distinct per-rank, per-position small integers: (rank + 1) * (i % 7 + 1)."""
    return (torch.arange(count, dtype=torch.int64) % 7 + 1).to(DTYPE) * (rank + 1)


def _all_gather(out: torch.Tensor, inp: torch.Tensor) -> None:
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    fn(out, inp)


def _reduce_scatter(out: torch.Tensor, inp: torch.Tensor) -> None:
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    fn(out, inp)


def _send_recv(send: torch.Tensor, recv: torch.Tensor, rank: int, world: int) -> None:
    """Each rank sends to the next and receives from the previous (nccl-tests' sendrecv)."""
    ops = [dist.P2POp(dist.isend, send, (rank + 1) % world), dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()


@dataclass(frozen=True)
class Collective:
    name: str
    bus_factor: Callable[[int], float]
    # count_for(nbytes, world) -> elements per rank of the send buffer (0 if the size is too small)
    count_for: Callable[[int, int], int]
    # per-rank buffers as a multiple of nbytes (an upper bound: a shard of 1/n counted whole)
    buffers: int = 1

    def shown_count(self, count: int, world: int) -> int:
        """nccl-tests' `count` of a buffer of `count` elements (count_for's): one rank's share (its `paramcount`)
        where the collective splits the buffer over the ranks, else the whole buffer."""
        return count // world if self.count_for is _split else count

    def min_bytes(self, world: int) -> int:
        """Smallest size the benchmark runs (it skips smaller ones): one float32 per rank for a collective that
        splits the buffer over the ranks (all_gather, reduce_scatter, all_to_all), one float32 for the others
        (all_reduce, broadcast, send_recv send the whole buffer; 4 B x ranks dropped their small sizes)."""
        return ELEM if self.count_for(ELEM, world) > 0 else ELEM * world


def peak_bytes(name: str, nbytes: int, world: int) -> int:
    """Per-rank peak memory of one size, an upper bound to refuse a size the host cannot hold: the buffers plus
    the check's int64 pattern temporaries and expected result (peak RSS measured 4-7.5x nbytes at 256 MiB)."""
    return (COLLECTIVES[name].buffers + 6) * nbytes


def _per_rank(nbytes: int, world: int) -> int:
    return nbytes // ELEM


def _split(nbytes: int, world: int) -> int:
    return (nbytes // ELEM // world) * world


COLLECTIVES: dict[str, Collective] = {
    "all_reduce": Collective("all_reduce", lambda n: 2 * (n - 1) / n, _per_rank),
    "all_gather": Collective("all_gather", lambda n: (n - 1) / n, _split, 2),
    "reduce_scatter": Collective("reduce_scatter", lambda n: (n - 1) / n, _split, 2),
    "all_to_all": Collective("all_to_all", lambda n: (n - 1) / n, _split, 2),
    "broadcast": Collective("broadcast", lambda n: 1.0, _per_rank),
    "send_recv": Collective("send_recv", lambda n: 1.0, _per_rank, 2),
}


class Prepared:
    """Buffers of one collective at one size, with `run()` (the timed call) and `check()`."""

    def __init__(self, name: str, count: int, rank: int, world: int) -> None:
        self.name, self.count, self.rank, self.world = name, count, rank, world
        n = world
        if name == "all_reduce":
            self.buf = torch.zeros(count, dtype=DTYPE)
            self.run = lambda: dist.all_reduce(self.buf)
        elif name == "all_gather":
            self.inp = torch.zeros(count // n, dtype=DTYPE)
            self.out = torch.empty(count, dtype=DTYPE)
            self.run = lambda: _all_gather(self.out, self.inp)
        elif name == "reduce_scatter":
            self.inp = torch.zeros(count, dtype=DTYPE)
            self.out = torch.empty(count // n, dtype=DTYPE)
            self.run = lambda: _reduce_scatter(self.out, self.inp)
        elif name == "all_to_all":
            self.inp = torch.zeros(count, dtype=DTYPE)
            self.out = torch.empty(count, dtype=DTYPE)
            self.run = lambda: dist.all_to_all_single(self.out, self.inp)
        elif name == "broadcast":
            self.buf = torch.zeros(count, dtype=DTYPE)
            self.run = lambda: dist.broadcast(self.buf, src=0)
        elif name == "send_recv":
            self.inp = torch.zeros(count, dtype=DTYPE)
            self.out = torch.empty(count, dtype=DTYPE)
            self.run = lambda: _send_recv(self.inp, self.out, rank, world)
        else:
            raise ValueError(f"unknown collective {name!r}; known: {', '.join(COLLECTIVES)}")

    def check(self) -> str | None:
        """Run once on patterned data; None if every element is right, else what is wrong."""
        c, r, n = self.count, self.rank, self.world
        if self.name == "all_reduce":
            self.buf.copy_(_pattern(c, r))
            self.run()
            want = _pattern(c, 0) * (n * (n + 1) // 2)
            got = self.buf
        elif self.name == "all_gather":
            m = c // n
            self.inp.copy_(_pattern(m, r))
            self.run()
            want = torch.cat([_pattern(m, q) for q in range(n)])
            got = self.out
        elif self.name == "reduce_scatter":
            m = c // n
            full = _pattern(c, r) + torch.arange(c, dtype=DTYPE) % 5  # position-dependent per shard
            self.inp.copy_(full)
            self.run()
            total = sum(_pattern(c, q) + torch.arange(c, dtype=DTYPE) % 5 for q in range(n))
            want = total[r * m : (r + 1) * m]
            got = self.out
        elif self.name == "all_to_all":
            m = c // n
            # chunk j of rank q holds 100*q + j + pattern, so the receiver can tell who sent which chunk
            self.inp.copy_(torch.cat([_pattern(m, 0) + 100 * r + j for j in range(n)]))
            self.run()
            want = torch.cat([_pattern(m, 0) + 100 * q + r for q in range(n)])
            got = self.out
        elif self.name == "broadcast":
            self.buf.copy_(_pattern(c, r))
            self.run()
            want, got = _pattern(c, 0), self.buf
        else:  # send_recv
            self.inp.copy_(_pattern(c, r))
            self.out.zero_()
            self.run()
            want, got = _pattern(c, (r - 1) % n), self.out
        bad = (got != want).nonzero()
        if len(bad):
            i = int(bad[0])
            return (f"{self.name}: {len(bad)} of {got.numel()} elements wrong on rank {r}, "
                    f"first at {i}: {float(got[i])} != {float(want[i])}")
        self.reset()
        return None

    def reset(self) -> None:
        """Zero the inputs again so repeated timed calls never grow values (no overflow, no denormals)."""
        for name in ("buf", "inp"):
            t = getattr(self, name, None)
            if t is not None:
                t.zero_()
