"""[parallel] keys a layout does not use (FSDP's `mp_param_dtype` on one process, say): named once, by rank 0.

Why: the run succeeds without them (`mp_param_dtype` on one process trains in fp32), so a user would believe
they tested FSDP mixed precision or PowerSGD. Not an error: one config may serve 1- and N-process runs.
"""

from __future__ import annotations

from collections.abc import Callable

from stride.config.reference import default_text
from stride.config.schema import ParallelConfig
from stride.kernels.runtime import notice_once
from stride.parallel.layout import Layout

# [parallel] keys that act on one part of a layout only: when they act, and what they act on (for the notice).
_Acts = tuple[Callable[[ParallelConfig, Layout], bool], str]
_FSDP: _Acts = (lambda p, lay: lay.dp_shard > 1, "FSDP2's sharded parameters (`parallel.dp_shard` > 1)")
_DDP: _Acts = (lambda p, lay: lay.dp_shard == 1 and lay.dp_replicate > 1,
               "DDP's gradient all-reduce (several data-parallel processes with `parallel.dp_shard` = 1)")
_TP: _Acts = (lambda p, lay: lay.tp > 1, "tensor parallelism (`parallel.tp` > 1)")
_PP: _Acts = (lambda p, lay: lay.pp > 1, "the pipeline (`parallel.pp` > 1)")
_GROUP: _Acts = (lambda p, lay: lay.world_size > 1, "the process group of a multi-process run (--nproc)")
_POWERSGD: _Acts = (lambda p, lay: _DDP[0](p, lay) and p.comm_hook == "powersgd",
                    "DDP's PowerSGD hook (`parallel.comm_hook` = 'powersgd')")
# the pipeline applies DDP without the timing hook (stride.parallel.pipeline), so DDP's timing acts outside it only
_DDP_TIMED: _Acts = (lambda p, lay: _DDP[0](p, lay) and lay.pp == 1,
                     "DDP's gradient all-reduce outside a pipeline (`parallel.pp` = 1)")
_ACTS_ON: dict[str, _Acts] = {
    "mp_param_dtype": _FSDP, "reshard_after_forward": _FSDP,
    "ddp_bucket_mb": _DDP, "gradient_as_bucket_view": _DDP, "static_graph": _DDP, "comm_hook": _DDP,
    "comm_timing": _DDP_TIMED, "powersgd_rank": _POWERSGD,
    "sequence_parallel": _TP,
    "pp_schedule": _PP, "microbatches": _PP, "pp_stages_per_rank": _PP,
    "backend": _GROUP, "collective_timeout_s": _GROUP,
}


def unused_parallel_keys(p: ParallelConfig, layout: Layout) -> list[str]:
    """The [parallel] keys set away from their default that do nothing in `layout`, each with what it acts on.

    Why: the run succeeds without them (`mp_param_dtype` on one process trains in fp32), so a user would believe
    they tested FSDP mixed precision or PowerSGD. Not an error: one config may serve 1- and N-process runs."""
    default = ParallelConfig()
    return [f"`parallel.{key}` = {default_text(getattr(p, key))} acts on {what}"
            for key, (acts, what) in _ACTS_ON.items()
            if getattr(p, key) != getattr(default, key) and not acts(p, layout)]


def notice_unused_parallel_keys(p: ParallelConfig, layout: Layout, rank: int = 0) -> None:
    """Say once, on one line and from rank 0 only, which set [parallel] keys this layout ignores (see above);
    through the same channel as the other fallback notices (stride.kernels.runtime.notice_once)."""
    unused = unused_parallel_keys(p, layout) if rank == 0 else []
    if unused:
        procs = f"{layout.world_size} process{'es' if layout.world_size > 1 else ''}"
        notice_once("parallel-unused-keys:" + ";".join(unused),
                    f"stride.parallel: no effect on this layout ({layout.strategy}, {procs}): " + "; ".join(unused))
