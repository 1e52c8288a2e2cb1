"""summary.json: what a finished `fit()` measured, from the loop's tallies and the trainer's set-up."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from stride.config import config_hash
from stride.config.schema import RunConfig
from stride.files.rank_share import ranks_sharing_cores, usable_cores
from stride.metrics.contention import OtherProcessesClock, contention_note
from stride.metrics.hashing import params_sha256
from stride.metrics.memory import peak_memory
from stride.metrics.peak import Peak, device_peak, mfu_fields
from stride.metrics.step_timer import StepTimer
from stride.optim.factory import optimizer_impl
from stride.parallel.context import Parallel
from stride.train.precision import Precision


@dataclass
class LoopTally:
    """What the step loop adds up besides the step timer."""

    t_start: float
    start_step: int = 0  # the step this process started from (a resumed or extended run: its checkpoint's)
    val_loss: float | None = None
    time_to_target: float | None = None
    val_time: float = 0.0
    timed_samples: int = 0  # global: every rank's samples, over the timed (post warm-up) steps
    comm_exposed: float = 0.0  # DDP all-reduce seconds over timed steps (CPU): backward waited on it
    comm_hidden: float = 0.0  # ... and the seconds it overlapped compute
    wall: float = 0.0  # this process's loop
    time_before: float | None = 0.0  # the run's training seconds before this process (None: unknown, an old checkpoint)
    lost_time: float | None = 0.0  # training seconds killed processes spent past their last checkpoint (None: unknown)
    waiting_threads: float | None = None  # threads waiting for a core on average over the loop (metrics.contention)
    # started with the tally, as the loop starts: the cores' worth other processes used on this process's cores
    others: OtherProcessesClock = field(default_factory=OtherProcessesClock.started)


class Summarised(Protocol):
    """The parts of a trainer the summary reads (stride.train.trainer.Trainer)."""

    cfg: RunConfig
    step: int
    par: Parallel
    timer: StepTimer
    device: torch.device
    model: nn.Module
    precision: Precision
    compute_precision: str  # the matmuls' dtype (stride.parallel.layout.compute_precision)
    peak: Peak
    flops_per_step: int | None
    flops_samples: int  # the samples (over data-parallel ranks) of the step flops_per_step was counted on
    seq_len: int
    n_params: int
    n_ac: int
    kernels_impl: str
    skipped_steps: int
    saved_activation_bytes: int | None
    data_loader: dict[str, Any] | None
    inputs_from: dict[str, str]
    optimizer: torch.optim.Optimizer

    def data_changed_in_place(self) -> list[str] | None: ...


def comm_cost(exposed: float, hidden: float, total: float | None, cpu: bool, cores: int | None = None,
              threads: int | None = None, ranks: int | None = None) -> dict[str, Any]:
    """`comm_core_free`: whether gloo's thread had a core of its own (CPU; None on an accelerator, whose collectives
    run on their own stream) and `comm_cost_fraction`: the share of the step communication costs, the exposed
    part, plus the hidden part where no core was free for it. On 2 ranks x (1 thread + gloo's) on 2 cores a 68M
    MLP's all-reduce read 7 % exposed while DDP cost 42 % of its step (outside audit 17)."""
    if not total:
        return {"comm_core_free": None, "comm_cost_fraction": None}
    free = None
    if cpu:
        cores = cores if cores is not None else usable_cores()
        threads = threads if threads is not None else torch.get_num_threads()
        ranks = ranks_sharing_cores(ranks) or 1  # a rank pinned to cores of its own shares them with nobody
        free = ranks * (threads + 1) <= cores
    return {"comm_core_free": free, "comm_cost_fraction": (exposed + (hidden if free is False else 0.0)) / total}


def warmup_note(steps: int, start_step: int, skip: int) -> str | None:
    """Why the figures are not steady-state where this process ran no step past the warm-up (None where it did).

    The trainer then times every step (something, rather than nothing): compile, allocator and first-touch
    costs are in the step time and throughput, and nothing else would say so (timed_steps alone)."""
    ran = steps - start_step
    if ran > skip:
        return None
    return (f"train.steps = {steps} is not above metrics.skip_steps = {skip}"
            + (f" (this process ran steps {start_step + 1}..{steps})" if start_step else "")
            + f": every step was timed, warm-up included, so step time and throughput are not steady-state; raise "
            f"train.steps above {start_step + skip} or lower metrics.skip_steps")


def time_note(tally: LoopTally) -> str | None:
    """Why the run's time figures are empty where earlier processes' training time is unknown (None: known)."""
    if tally.time_before is not None:
        return None
    reached = (f"; this process reached the target {tally.time_to_target:.2f} s after its loop started"
               if tally.time_to_target is not None else "")
    return (f"resumed at step {tally.start_step} from a checkpoint that does not record the run's training time "
            f"(written by an older stride, or exported): the time before step {tally.start_step} is unknown, so "
            f"time_to_target_s and run_time_s are left empty, and metrics.jsonl's time_s counts from 0 again from "
            f"step {tally.start_step + 1} (this process's clock){reached}")


def mean_step_flops(counted: int | None, counted_samples: int, timed_samples: int, timed_steps: int) -> int | None:
    """The model FLOPs of the mean timed step, from those `counted` on a step of `counted_samples` samples: a model's
    FLOPs grow with its batch, so a run whose batches differ in size (an iterable's last partial batch, a source of
    its own batch size) is credited with the samples it trained, as its samples/s is. Equal batches: `counted`."""
    if not counted or not counted_samples or not timed_steps or timed_samples == counted_samples * timed_steps:
        return counted
    return round(counted * timed_samples / (counted_samples * timed_steps))


def run_summary(tr: Summarised, tally: LoopTally, loss_sum: torch.Tensor) -> dict[str, Any]:
    """The summary of a run. Every rank calls it: the loss mean and a pipeline's parameter gather are collectives."""
    t, timer, par = tr.cfg.train, tr.timer, tr.par
    other = tally.others.cores() if tr.device.type == "cpu" else None  # before the collectives below
    breakdown = timer.mean()
    step_s = breakdown["total"]
    samples_per_s = tally.timed_samples / timer.totals["total"] if timer.totals.get("total") else None
    flops = mean_step_flops(tr.flops_per_step, tr.flops_samples, tally.timed_samples, timer.steps)
    achieved = flops / step_s if flops and step_s else None
    own_mem, mem_kind = peak_memory(tr.device)
    mem, mem_rank = par.max_with_rank(own_mem)  # the fullest rank's: what each device of the job must hold
    comm = par.comm_timer is not None
    return {
        "name": t.name,
        "status": "finished",  # "diverged" (with diverged_at_step) for a run stopped by a non-finite loss
        "steps": tr.step,
        "start_step": tally.start_step,  # steps start_step+1..steps ran in this process: the figures below are theirs
        "final_train_loss": float(par.mean(loss_sum)),  # last step, mean over ranks
        "final_val_loss": tally.val_loss,
        "samples_per_s": samples_per_s,
        "timesteps_per_s": samples_per_s * tr.seq_len if samples_per_s else None,
        "step_time_s": step_s,
        "step_time_breakdown_s": {k: v for k, v in breakdown.items() if k != "total"},
        "timed_steps": timer.steps,
        "timing_note": warmup_note(t.steps, tally.start_step, tr.cfg.metrics.skip_steps),  # None: steady-state figures
        # this process's threads waiting for a core, on average over the loop, all of them: its own background
        # threads (gloo's) waiting on its compute count too (a pinned 1-thread gloo rank, quiet host: 0.10-0.43)
        "run_queue_waiting_threads": tally.waiting_threads,
        # cores' worth of CPU time other processes (and the kernel's interrupts) used on the cores this process may
        # run on, on average over the loop: their non-idle time less the CPU time of this process and of the run's
        # other processes on them (its local ranks, its loader workers); CPU runs only (None elsewhere)
        "other_processes_cores": other,
        # where min(waiting, other processes' cores) is a quarter of a thread or more (or the torch threads outnumber
        # the cores and the wait is 0.25+), the figures are of a contended host and the note says so (audit 21, H1)
        "contention_note": contention_note(tally.waiting_threads, torch.get_num_threads(), usable_cores(), other)
        if tr.device.type == "cpu" else None,
        # per rank under every layout (MFU is against one device's peak): the model FLOPs of this rank's batch,
        # under TP its group's / tp, under pp the mean stage's (docs/parallel.md); their sum over ranks is the step's
        # of the mean timed step: counted once on the first batch, x the timed steps' mean samples / that batch's
        "flops_per_step": flops,
        "achieved_flops_per_s": achieved,
        # peak_flops_per_s, peak_flops_source, mfu, mfu_error
        **mfu_fields(achieved, tr.peak, lambda: device_peak(tr.device, tr.compute_precision, tr.cfg.metrics.peak_flops,
                                                            fresh=True)),
        "peak_mem_bytes": mem,  # the largest over ranks (one process: its own)
        "peak_mem_kind": mem_kind,
        "peak_mem_rank": mem_rank,  # the rank that peaked there
        "saved_activation_bytes": tr.saved_activation_bytes,
        "activation_checkpointed_blocks": tr.n_ac,
        # on the run's training clock: every process's loop time, summed across resumes (time_note where unknown)
        "time_to_target_s": tally.time_to_target if tally.time_before is not None else None,
        "target_val_loss": t.target_val_loss,
        "run_time_s": tally.time_before + tally.wall if tally.time_before is not None else None,
        "time_note": time_note(tally),
        # outside the clock above (a goodput clock): seconds killed processes trained past their last checkpoint,
        # trained again after the resume, over every resume of the run (audit 13, L4); None: unknown
        "lost_time_s": tally.lost_time,
        "wall_time_s": tally.wall,  # this process's loop (a resumed run: since its resume)
        "val_time_s": tally.val_time,
        "skipped_steps": tr.skipped_steps,
        "loss_scale": tr.precision.scaler.get_scale() if tr.precision.scaler else None,
        "world_size": par.world_size,
        "parallel": par.layout.strategy,
        "per_rank_samples_per_s": samples_per_s / par.world_size if samples_per_s else None,
        # Exposed: backward waited on the all-reduce (part of "backward"); hidden: overlapped compute.
        "comm_exposed_s": tally.comm_exposed / timer.steps if comm and timer.steps else None,
        "comm_hidden_s": tally.comm_hidden / timer.steps if comm and timer.steps else None,
        "exposed_comm_fraction": tally.comm_exposed / timer.totals["total"]
        if comm and timer.totals.get("total") else None,
        # what the all-reduce costs the step: on a CPU host with no core free for gloo's thread its "hidden" time is
        # taken from the compute beside it (ranks x (intra-op threads + 1) > cores), so it counts too
        **comm_cost(tally.comm_exposed, tally.comm_hidden, timer.totals.get("total") if comm else None,
                    tr.device.type == "cpu"),
        "device": str(tr.device),
        "precision": t.precision,
        "compute_precision": tr.compute_precision,  # the matmuls' dtype: `precision`, or FSDP2's mp_param_dtype
        "kernels": tr.kernels_impl,
        "compile": t.compile,  # what torch.compile wrapped: off, model (per block under a pipeline), model+optimizer
        "optimizer_impl": optimizer_impl(tr.optimizer),  # the implementation that ran (a fallback says so)
        "params": tr.n_params,
        "params_sha256": params_sha256(par.pipeline.full_state(tr.model) if par.pipeline else tr.model),
        "pipeline": par.plan_summary(),
        "config_hash": config_hash(tr.cfg),
        # "caller": the model or the training data came from the Python call, not from config.toml's [model] /
        # [data] (whose seq_len, for one, then says nothing of the data)
        "inputs_from": dict(tr.inputs_from),
        "data_loader": tr.data_loader,  # the loader's settings, why, and the probe's figures (stride.data.probe)
        # a launcher's ranks: the cores each local rank was pinned to, or why not (parallel.pin_ranks); null: 1 process
        "rank_pinning": rp.record() if (rp := getattr(tr, "rank_pinning", None)) is not None else None,
        # store files this rank maps that were truncated, grown or written in place during the run: its batches from
        # then on were read from other bytes (a removed or replaced file is not listed: the map keeps the old one);
        # null: the data came from the caller, not checked
        "data_changed_in_place": tr.data_changed_in_place(),
    }
