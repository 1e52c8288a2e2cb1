"""DDP communication hooks by name, and a timing wrapper that splits exposed from hidden comm.

Hooks come from torch.distributed.algorithms.ddp_comm_hooks. Two torch limits on gloo (FACTS.md):
DDP refuses `bf16_compress_hook` by its *name* unless NCCL runs, so stride registers the same
function under another name; and PowerSGD deadlocks on gloo with more than one bucket, so with
gloo stride gives it one bucket.

Deterministic mode at 3+ ranks sums gradients in rank order (`rank_ordered_mean`), not with the
backend's all-reduce: gloo's ring sums each element in an order set by where it lies in the bucket,
and DDP's first step after it is built uses another bucket layout (torch 2.13: all parameters in one
bucket, in registration order) than every later step (rebuilt in gradient-ready order). A resumed
run's first step therefore summed its gradients in another order than the uninterrupted run's at
that step and differed in the last bit (3 gloo ranks; at 2 ranks a + b is exact in either order).

Exposed vs hidden: each bucket's all-reduce is launched when its gradients are ready and runs while
backward computes the next ones. The wrapper stamps launch and completion (host clock) of every
bucket; after the last launch, compute is done, so what remains until the last completion is time
the step *waited* (exposed); the rest of the communication's busy time overlapped compute (hidden).
On CUDA a future completes when its work is enqueued, not finished, so timing is CPU-only.
"""

# No `from __future__ import annotations`: DDP checks a hook's `bucket` annotation is dist.GradBucket
# itself, not the string.
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from stride.config.schema import ParallelConfig


def bf16_allreduce(process_group: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """torch's bf16_compress_hook under a name DDP does not reject on gloo."""
    return default_hooks.bf16_compress_hook(process_group, bucket)


GATHER_PIECE_BYTES = 4 * 2**20
"""All-gathers of at most this many bytes of the bucket: gloo's all-gather of a whole 25 MB bucket took 8x its
all-reduce at 3 ranks, in 4 MiB pieces 1.9-2.3x (2-core AMD EPYC family 26; docs/checkpoint.md)."""


def rank_ordered_mean(process_group: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The bucket's mean over the group, each element summed rank 0 + rank 1 + ... whatever the bucket's layout.

    All-gathers instead of the all-reduce: every rank receives (n - 1) x the bucket instead of a ring's
    2 (n - 1) / n x, and holds n copies of it until the sum; deterministic mode pays that so that a gradient does
    not depend on the bucket DDP put it in (see the module docstring)."""
    buf = bucket.buffer()
    n = dist.get_world_size(process_group)
    pieces = buf.split(max(1, GATHER_PIECE_BYTES // buf.element_size()))
    gathered = [list(torch.empty((n, len(piece)), dtype=buf.dtype, device=buf.device).unbind(0)) for piece in pieces]
    works = [dist.all_gather(parts, piece, group=process_group, async_op=True)
             for parts, piece in zip(gathered, pieces, strict=True)]  # launched in this order on every rank

    def mean(_: torch.futures.Future[Any]) -> torch.Tensor:
        for piece, parts in zip(pieces, gathered, strict=True):
            piece.copy_(parts[0])
            for part in parts[1:]:
                piece.add_(part)
        return buf.div_(n)

    return torch.futures.collect_all([w.get_future() for w in works if w is not None]).then(mean)


def sums_in_rank_order(group: dist.ProcessGroup) -> bool:
    """Deterministic mode (`train.deterministic`, torch's flag) on 3+ ranks: where the all-reduce's order shows."""
    return torch.are_deterministic_algorithms_enabled() and dist.get_world_size(group) > 2


class CommTimer:
    """Launch/finish stamps of every bucket all-reduce since the last `reset()`."""

    def __init__(self) -> None:
        self.spans: list[list[float]] = []

    def reset(self) -> None:
        self.spans = []

    def split(self) -> tuple[float, float]:
        """(exposed, hidden) seconds of the spans recorded since reset()."""
        spans = [s for s in self.spans if len(s) == 2]
        if not spans:
            return 0.0, 0.0
        spans.sort()
        busy, cur_a, cur_b = 0.0, spans[0][0], spans[0][1]
        for a, b in spans[1:]:  # union of [launch, done] intervals
            if a > cur_b:
                busy += cur_b - cur_a
                cur_a, cur_b = a, b
            else:
                cur_b = max(cur_b, b)
        busy += cur_b - cur_a
        exposed = max(0.0, max(b for _, b in spans) - max(a for a, _ in spans))
        return exposed, max(busy - exposed, 0.0)

    def wrap(self, hook: Any) -> Any:
        def timed(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
            span = [time.perf_counter()]
            self.spans.append(span)

            def done(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
                span.append(time.perf_counter())
                return fut.value()

            return hook(state, bucket).then(done)

        timed.__name__ = f"timed_{getattr(hook, '__name__', 'hook')}"
        return timed


def register_comm_hook(ddp: DDP, p: ParallelConfig, group: dist.ProcessGroup) -> CommTimer | None:
    """Register the configured hook (timed on CPU); returns the timer, or None without timing."""
    state: Any = group
    if p.comm_hook == "none":
        hook: Any = rank_ordered_mean if sums_in_rank_order(group) else default_hooks.allreduce_hook
    elif p.comm_hook == "fp16":
        hook = default_hooks.fp16_compress_hook
    elif p.comm_hook == "bf16":
        hook = bf16_allreduce
    else:  # powersgd
        state = powerSGD_hook.PowerSGDState(
            process_group=group, matrix_approximation_rank=p.powersgd_rank, start_powerSGD_iter=2
        )
        hook = powerSGD_hook.powerSGD_hook
    on_cpu = next(ddp.module.parameters()).device.type == "cpu"
    if p.comm_timing and on_cpu:
        timer = CommTimer()
        ddp.register_comm_hook(state, timer.wrap(hook))
        return timer
    if hook is not default_hooks.allreduce_hook:  # DDP's own all-reduce is that hook's work, without a hook
        ddp.register_comm_hook(state, hook)
    return None
