"""Pipeline arithmetic: schedules, stages per rank, which stages a rank runs, microbatch counts.

Pure arithmetic on the config, so every impossible pipeline is a ConfigError naming the keys before
any process group exists (see stride.parallel.layout).

Microbatches and gradient accumulation: a pipeline already accumulates gradients over its
microbatches, so one optimizer step runs ONE schedule over `train.grad_accum x parallel.microbatches`
microbatches of each data-parallel rank's batch (one fill and drain, one gradient reduction). The
gradient is the mean over all of them, as in one process with the same global batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from stride.config.errors import ConfigError, first_few
from stride.config.schema import ParallelConfig

# name -> (torch class name, stages per rank it takes: None = any, placement of stages on ranks)
SCHEDULES: dict[str, tuple[str, int | None, str]] = {
    "gpipe": ("ScheduleGPipe", 1, "loop"),
    "1f1b": ("Schedule1F1B", 1, "loop"),
    "interleaved_1f1b": ("ScheduleInterleaved1F1B", None, "loop"),
    "zero_bubble": ("ScheduleInterleavedZeroBubble", None, "loop"),
    "zbv": ("ScheduleZBVZeroBubble", 2, "v"),
}
MULTI_STAGE = ("interleaved_1f1b", "zero_bubble", "zbv")
# Backward split into input- and weight-gradient passes: needs the eager autograd graph.
SPLIT_BACKWARD = ("zero_bubble", "zbv")


@dataclass(frozen=True)
class PipelinePlan:
    schedule: str
    pp: int  # ranks in the pipeline
    stages_per_rank: int
    n_microbatches: int  # per optimizer step: train.grad_accum x parallel.microbatches
    n_layers: int

    @property
    def n_stages(self) -> int:
        return self.pp * self.stages_per_rank

    @property
    def multi_stage(self) -> bool:
        """Run by torch's multi-stage schedule classes (a list of stages per rank)."""
        return self.schedule in MULTI_STAGE

    def rank_of(self, stage: int) -> int:
        """Loop placement: stage s on rank s % pp; V placement (ZBV): rank r holds r and 2pp-1-r."""
        if SCHEDULES[self.schedule][2] == "v" and stage >= self.pp:
            return self.n_stages - 1 - stage
        return stage % self.pp

    def stages_of(self, pp_rank: int) -> list[int]:
        return [s for s in range(self.n_stages) if self.rank_of(s) == pp_rank]


def stages_per_rank(p: ParallelConfig) -> int:
    """`parallel.pp_stages_per_rank`, or its default: 2 for the multi-stage schedules, else 1."""
    if p.pp_stages_per_rank:
        return p.pp_stages_per_rank
    return 2 if p.pp_schedule in MULTI_STAGE else 1


def plan_pipeline(
    p: ParallelConfig, n_layers: int | None, rank_batch: int, grad_accum: int, *, compile_mode: str = "off",
) -> PipelinePlan:
    """The pipeline for `p.pp` ranks, or a ConfigError naming the keys that make it impossible."""
    if p.pp_schedule not in SCHEDULES:
        raise ConfigError(f"`parallel.pp_schedule` = {p.pp_schedule!r} is not one of {', '.join(SCHEDULES)}")
    v = stages_per_rank(p)
    fixed = SCHEDULES[p.pp_schedule][1]
    if fixed is not None and v != fixed:
        raise ConfigError(
            f"`parallel.pp_schedule` = {p.pp_schedule!r} runs {fixed} stage(s) per rank, but "
            f"`parallel.pp_stages_per_rank` = {p.pp_stages_per_rank}"
            + ("; use interleaved_1f1b or zero_bubble for more" if fixed == 1 else "")
        )
    micro = p.microbatches or p.pp * v
    n = micro * grad_accum
    if n_layers is None:
        raise ConfigError(f"`parallel.pp` = {p.pp} needs the model's layers in `model.blocks` (an nn.ModuleList)")
    if n_layers < p.pp * v:
        raise ConfigError(
            f"`parallel.pp` = {p.pp} x `parallel.pp_stages_per_rank` = {v} makes {p.pp * v} pipeline stages, "
            f"but the model has only {n_layers} layers (each stage needs one): use fewer stages or more layers"
        )
    if rank_batch % n:
        raise ConfigError(
            f"each data-parallel rank's batch of {rank_batch} samples (`train.batch_size` / data-parallel degree) "
            f"does not split into `train.grad_accum` = {grad_accum} x `parallel.microbatches` = {micro} "
            f"= {n} equal microbatches: {_fix_microbatches(rank_batch, grad_accum, micro)}"
        )
    if p.pp_schedule == "1f1b" and n < p.pp:
        raise ConfigError(
            f"`parallel.pp_schedule` = '1f1b' needs at least `parallel.pp` = {p.pp} microbatches per step; "
            f"`train.grad_accum` x `parallel.microbatches` = {n}: {_fix_too_few(rank_batch, grad_accum, p.pp)}"
        )
    if p.pp_schedule in ("interleaved_1f1b", "zero_bubble") and n % max(1, n // p.pp):
        rounds = max(1, n // p.pp)
        raise ConfigError(
            f"`parallel.pp_schedule` = {p.pp_schedule!r} runs microbatches in rounds of `parallel.pp` = {p.pp}: "
            f"{n} microbatches (`train.grad_accum` x `parallel.microbatches`) is not a multiple of its "
            f"{rounds} rounds; use a multiple of {p.pp}"
        )
    if p.pp_schedule == "zbv" and n < 2 * p.pp - 1:
        raise ConfigError(
            f"`parallel.pp_schedule` = 'zbv' needs at least 2 x `parallel.pp` - 1 = {2 * p.pp - 1} microbatches per "
            "step; "
            f"`train.grad_accum` x `parallel.microbatches` = {n}: "
            f"{_fix_too_few(rank_batch, grad_accum, 2 * p.pp - 1)}"
        )
    if p.pp_schedule in SPLIT_BACKWARD and compile_mode != "off":
        raise ConfigError(
            f"`parallel.pp_schedule` = {p.pp_schedule!r} splits backward into input- and weight-gradient passes "
            "over the eager autograd graph, which a compiled graph does not expose: set `train.compile` = 'off' "
            "or use gpipe / 1f1b / interleaved_1f1b"
        )
    if p.pp_schedule in SPLIT_BACKWARD and p.dp_shard > 1 and p.reshard_after_forward:
        # torch's weight-gradient pass finds the weights through `module.parameters()`; a block FSDP2
        # resharded after forward hands it the sharded DTensors, which are not in the autograd graph,
        # so their gradients are never computed (seen: the last stage's blocks never moved, parameters
        # 2e-2 from one process after 6 steps). Kept gathered, the pass sees the parameters in the graph.
        raise ConfigError(
            f"`parallel.pp_schedule` = {p.pp_schedule!r} with `parallel.dp_shard` = {p.dp_shard} needs "
            "`parallel.reshard_after_forward` = false: the weight-gradient pass must find the gathered "
            "parameters a block used in forward (a block resharded after forward gets no weight gradients)"
        )
    if p.pp_schedule in SPLIT_BACKWARD and p.dp_replicate > 1 and p.dp_shard == 1 and p.comm_hook != "none":
        # stride.parallel.pipeline averages these gradients itself after the schedule, without DDP
        raise ConfigError(
            f"`parallel.comm_hook` = {p.comm_hook!r} with `parallel.pp_schedule` = {p.pp_schedule!r}: the zero-bubble "
            "schedules' gradients bypass DDP (they are averaged over the replicas after the schedule), so a DDP "
            "communication hook would not run; set `parallel.comm_hook` = 'none' or use gpipe / 1f1b / interleaved_1f1b"
        )
    return PipelinePlan(p.pp_schedule, p.pp, v, n, n_layers)


def _fitting_microbatches(rank_batch: int, grad_accum: int, least: int = 1) -> list[int]:
    """`parallel.microbatches` values >= `least` that split each accumulation step's share of a rank's batch."""
    per_step = rank_batch // grad_accum
    return [m for m in range(max(1, least), per_step + 1) if per_step % m == 0]


def _fix_microbatches(rank_batch: int, grad_accum: int, micro: int) -> str:
    """The fix for microbatches that do not divide the batch: values that do, or the batch to make it."""
    fits = _fitting_microbatches(rank_batch, grad_accum)
    return (f"set `parallel.microbatches` to one that divides {rank_batch // grad_accum} ({first_few(fits, 8)}), or "
            f"make `train.batch_size` a multiple of {micro * grad_accum} x the data-parallel degree")


def _fix_too_few(rank_batch: int, grad_accum: int, least: int) -> str:
    """The fix for a schedule that needs at least `least` microbatches per step (grad_accum x microbatches)."""
    need = -(-least // grad_accum)  # microbatches per accumulation step that reach `least` with grad_accum
    fits = _fitting_microbatches(rank_batch, grad_accum, need)
    if fits:
        return f"set `parallel.microbatches` to {' or '.join(map(str, fits[:3]))} (>= {need}, dividing the batch)"
    return (f"each data-parallel rank's batch of {rank_batch} samples has too few for {least} microbatches: raise "
            f"`train.batch_size` or use `parallel.pp_schedule` = 'gpipe'")
