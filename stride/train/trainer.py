"""The trainer: a lean loop where every efficiency technique is a config switch.

Bring your own model and data (`Trainer(model=..., train_data=..., config=...)`) or let `[model]`
and `[data]` build them. The loop measures itself: every step is split into data wait, forward,
backward and optimizer (the rest is "other"), FLOPs are counted once for MFU, and a run directory
records config, environment, metrics.jsonl and summary.json.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from stride.checkpoint import RunFinished
from stride.checkpoint.rerun import open_run_folder
from stride.config import RunConfig, config_to_toml
from stride.config.validate import validate
from stride.data import mapped_files
from stride.data.build import build_data
from stride.files.strict_json import finite_number
from stride.kernels.runtime import notice_once
from stride.metrics.contention import ContentionClock, warn_contended
from stride.metrics.flops import count_train_flops
from stride.metrics.memory import SavedActivations, reset_peak
from stride.metrics.observe.build import check_observer_packages
from stride.metrics.observe.sink import Sink
from stride.metrics.peak import device_peak
from stride.metrics.run_dir import RunDir
from stride.metrics.step_timer import StepTimer
from stride.models.losses import LossFn
from stride.models.registry import build_model
from stride.optim.factory import build_optimizer, check_compiled_step, compiled_step
from stride.parallel.context import Parallel
from stride.parallel.layout import compute_precision
from stride.train.apply import apply_activation_checkpointing, apply_compile
from stride.train.batches import Batch, as_batches, data_position, endless, resumed_stream
from stride.train.callback_set import abort_callbacks, callbacks_for
from stride.train.callbacks import Callback, overrides
from stride.train.device import configure_process, resolve_device, seed_rank_stream
from stride.train.divergence import LossWatch, diverged
from stride.train.evaluate import validation_loss
from stride.train.kernels_apply import apply_kernels, check_kernels_compile
from stride.train.loss import loss_is_fused, resolve_loss
from stride.train.micro_batches import micro_batches, micro_loss
from stride.train.output_check import check_output
from stride.train.precision import Precision
from stride.train.profiling import phase_range, profiling_active
from stride.train.progress import TrainProgress
from stride.train.rank_cores import pin_this_rank
from stride.train.resources import check_resources
from stride.train.schedule import build_scheduler, sync_lr, trained_lr
from stride.train.summary import LoopTally, run_summary
from stride.train.unused_keys import notice_unused_keys

_NULL = contextlib.nullcontext()

log = logging.getLogger("stride")

ROLLBACK_POINTS = 8  # loop tallies kept for rollbacks: the newest checkpoints' (and the loop start's)


@dataclass
class _LoopPoint:
    """The loop's tallies at a step a checkpoint holds. A rollback to that checkpoint restores them, so the summary
    counts every step that stands once (timed_steps, throughput, step time, samples) and no rolled-back one, as
    metrics.jsonl then holds one record per step (docs/checkpoint.md, "Rollbacks")."""

    totals: dict[str, float]
    timed: int
    walls: int
    samples: int
    timed_samples: int
    comm: tuple[float, float]
    val_loss: float | None
    time_to_target: float | None
    val_time: float  # a rolled-back validation's time left val_time_s, as its record leaves metrics.jsonl


@dataclass
class TrainResult:
    summary: dict[str, Any]
    run_dir: Path | None
    history: list[dict[str, Any]] = field(default_factory=list)
    already_finished: str | None = None  # the folder held this run, finished: why nothing was trained (its summary)


class Trainer:
    def __init__(
        self,
        model: nn.Module | None = None,
        train_data: Any = None,
        val_data: Any = None,
        config: RunConfig | None = None,
        *,
        loss_fn: LossFn | None = None,
        out: str | Path | None = None,
        write_run_dir: bool = True,
        callbacks: Sequence[Callback] | None = None,
        overwrite: bool = False,
    ) -> None:
        """`callbacks` run first, in this order; then a checkpoint callback if `[checkpoint] enabled` and
        the observers `[metrics]` switches on, each unless one of its kind is among `callbacks`.
        `overwrite`: replace an earlier run in `out` (else it is continued by checkpoints, or refused)."""
        self.cfg = config if config is not None else RunConfig()
        validate(self.cfg)
        notice_unused_keys(self.cfg)  # a switch the config's other choices leave without effect: said, not silent
        check_observer_packages(self.cfg)  # a missing tracker library: one line now, not a traceback mid-run
        check_kernels_compile(self.cfg.train.kernels, self.cfg.train.compile)  # before any data or model is built
        check_compiled_step(self.cfg.optim.name, self.cfg.train.compile)
        t = self.cfg.train
        self.device = Parallel.device_for(resolve_device(t.device))  # cuda:LOCAL_RANK under a launcher
        # a rank of `stride train --nproc` on CPU: on cores of its own where they fit (parallel.pin_ranks), before the
        # threads check, the data probe (which counts this process's cores) and torch's and gloo's threads
        self.rank_pinning = pin_this_rank(self.cfg.parallel.pin_ranks, self.device.type == "cpu", t.threads)
        # a config that cannot fit is refused before anything is built (and too many threads warned of)
        check_resources(self.cfg, self.device, model=model is None, data=model is None or train_data is None)
        self._on_host = self.device.type == "cpu"
        configure_process(t, self.device)
        # what config.toml does not describe: a model, data or loss passed in here (summary.json `inputs_from`; `stride
        # repro` re-runs only what the config builds)
        self.inputs_from = {"model": "config" if model is None else "caller",
                            "data": "config" if train_data is None else "caller",
                            "loss": "config" if loss_fn is None else "caller"}
        bundle = None
        first_map = mapped_files.mark()
        from_store = train_data is None and self.cfg.data.source == "store"
        # [data]'s validation split belongs to [data]'s series: beside the caller's training data it measured another
        # series (final_val_loss 1.70 of the synthetic market for a run training at loss 1e6; outside audit 37)
        if train_data is not None and val_data is None and t.validates and int(os.environ.get("RANK", "0")) == 0:
            notice_once("train-own-data-no-val", "stride.train: no validation: the training data is the caller's and "
                        "[data] describes other data; pass val_data=(X, Y) to Trainer to validate")
        if model is None or train_data is None:
            # beside the caller's training data [data] only sizes the model: its validation split is not built
            bundle = build_data(self.cfg.data, t.batch_size, self.device,
                                validation=t.validates and train_data is None)
            val_data = val_data if val_data is not None or train_data is not None else bundle.val
            train_data = train_data if train_data is not None else bundle.train
        # the maps this trainer made of the config's store (summary.json `data_changed_in_place`, the checkpoint
        # callback's check): not another trainer's of the same store alive in this process; None: not a store's
        self._data_maps = range(first_map, mapped_files.mark()) if from_store else None
        if model is None:
            assert bundle is not None
            model = build_model(self.cfg.model, bundle.n_features, bundle.seq_len, bundle.n_horizons)
        self.model = model.to(self.device)  # the raw module: hashing, FLOPs, state dicts
        self.kernels_impl, self.kernel_modules = apply_kernels(self.model, t.kernels)
        self.loss_fn = resolve_loss(model, self.cfg, loss_fn)
        if self.kernels_impl != "torch" and not self.kernel_modules and not loss_is_fused(self.loss_fn):
            # fused kernels asked of a model with none of the modules they replace and a loss of its own (or the
            # caller's): nothing ran fused, and summary.json's `kernels` said the kernels' name (outside audit)
            if int(os.environ.get("RANK", "0")) == 0:
                notice_once("train-kernels-unused", f"stride.train: `train.kernels` = {t.kernels!r} has no effect in "
                            f"this run: {type(self.model).__name__} has no RMSNorm, SwiGLU or attention module to "
                            "fuse and its loss is not [model] loss (the caller's or the model's own); summary.json "
                            "says kernels 'torch'")
            self.kernels_impl = "torch"
        # Layout checked before any process group; then mesh (N > 1 processes) and per-rank data.
        self.par = Parallel.create(self.cfg, self.model, self.device, self.cfg.data.seq_len // self.cfg.model.patch_len)
        seed_rank_stream(t.seed, self.par.rank)  # weights are drawn: from here each rank its own dropout masks
        # how the training loader was set up (the host probe's choice, or the split on the device)
        self.data_loader = bundle.loader if bundle is not None and train_data is bundle.train else None
        self.train_data = self.par.shard_data(as_batches(train_data, t.batch_size, t.seed))
        self.val_data = (as_batches(val_data, t.batch_size, t.seed, shuffle=False, drop_last=False)
                         if val_data is not None else None)
        self.precision = Precision(t.precision, self.device)
        self.out = out
        self.write_run_dir = write_run_dir
        self.overwrite = overwrite
        self.callbacks: tuple[Callback, ...] = callbacks_for(self.cfg, callbacks or ())
        # per-step hooks go only to the callbacks that have them
        self._gates = [cb for cb in self.callbacks if overrides(cb, "before_optimizer_step")]
        self._loggers = [cb for cb in self.callbacks if overrides(cb, "on_log")]
        self._step_enders = [cb for cb in self.callbacks if overrides(cb, "on_step_end")]
        # a non-finite loss stops the run unless a callback skips and rolls back such steps (stride.train.divergence)
        self._losses = LossWatch(active=not any(cb.guards_nonfinite for cb in self.callbacks))
        self.diverged_at: int | None = None  # the first step whose loss was not finite (the run stops)
        self.step = 0  # optimizer steps taken; a resumed run starts from the loaded value
        self.skipped_steps = 0
        self._last_grad_norm: torch.Tensor | None = None  # the clipping's norm, read on log steps only
        self.saved_activation_bytes: int | None = None
        self.history: list[dict[str, Any]] = []
        # Samples each step trained, summed over the data-parallel ranks (warm-up included, as timer.step_seconds):
        # the batch the step was given, not `train.batch_size` (an iterable's own batches, a last partial batch)
        self.step_samples: list[int] = []
        # The run's training clock (metrics.jsonl `time_s`, time to target): seconds trained before this process's
        # loop, from the checkpoint resumed (None: unknown, a checkpoint that did not record it), plus this loop's.
        self._time_before: float | None = 0.0
        self._time_loaded = False  # a checkpoint's clock was loaded before the loop started
        # Training seconds that killed processes spent past their last checkpoint (lost, trained again): the
        # checkpoint's sum over earlier resumes plus the segment this resume drops (None: unknown, an old checkpoint)
        self._lost_time: float | None = 0.0
        self._clock_start: float | None = None  # perf_counter at this process's loop start
        self._clock_stop: float | None = None  # ... and at its end (the clock stops with the loop)
        self.run_dir: RunDir | None = None
        self._tally: LoopTally | None = None  # the loop's, while it runs (rollbacks restore parts of it)
        self._points: dict[int, _LoopPoint] = {}  # step -> the loop's tallies there (keep_rollback_point)
        self._pending: Batch | None = None
        self._plain = self._host_batches = False  # set by setup()
        self._measures = True
        self._is_setup = False

    # -- what callbacks see beyond attributes (stride.train.callbacks.TrainerView) --------------
    @property
    def pipelined(self) -> bool:
        return self.par.pipelined

    @property
    def loss_scaled(self) -> bool:
        return self.precision.scaler is not None

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "skipped_steps": self.skipped_steps,
                "scheduler": self.scheduler.state_dict(), "scaler": self.precision.state_dict(),
                "train_time_s": self.train_time(), "lost_time_s": self._lost_time}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.step = int(state["step"])
        self.skipped_steps = int(state["skipped_steps"])
        self.scheduler.load_state_dict(state["scheduler"])
        sync_lr(self.scheduler)  # a run extended to more steps follows its new schedule (stride.checkpoint.rerun)
        self.precision.load_state_dict(state["scaler"])
        if self._clock_start is None:  # a resume: the run's clock continues from the checkpoint's
            self._time_before = _seconds(state.get("train_time_s"))
            self._lost_time = _seconds(state.get("lost_time_s"))
            self._time_loaded = True
        # a rollback within the loop keeps the clock: the time spent since the checkpoint was spent training

    def train_time(self) -> float | None:
        """Seconds this run has trained: its loops' wall time (validation and checkpoint pauses included), summed
        over the processes that ran it (a resumed run continues its checkpoint's clock). None: unknown (resumed
        from a checkpoint that did not record it, or a trainer whose loop never ran and that loaded no clock)."""
        if self._clock_start is None:
            return self._time_before if self._time_loaded else None
        if self._time_before is None:
            return None
        end = self._clock_stop if self._clock_stop is not None else time.perf_counter()
        return self._time_before + (end - self._clock_start)

    def _add_lost_segment(self, run: RunDir | None) -> float | None:
        """The checkpoint's lost time plus the segment this resume drops: metrics.jsonl's last `time_s` past the
        checkpoint's step (rank 0's, shared with every rank) less the checkpoint's clock. A lower bound: lines
        still in the killed process's buffer (at most FLUSH_S seconds) and the gap before the restart are not in it."""
        logged = run.dropped_time_s if run is not None else None
        segment = max(0.0, logged - self._time_before) if logged is not None and self._time_before is not None else 0.0
        segment = self.par.max_over_ranks(segment)
        if self._lost_time is None or self._time_before is None:
            return None
        return self._lost_time + segment

    @staticmethod
    def _clock(tally: LoopTally) -> float:
        """Now on the run's training clock (`time_s`); where earlier processes' time is unknown, this loop's seconds."""
        return (tally.time_before or 0.0) + (time.perf_counter() - tally.t_start)

    def data_position(self) -> dict[str, Any]:
        return data_position(self.train_data, self.step)

    def resume_data(self, position: Mapping[str, Any]) -> None:
        self._pending = None  # setup()'s prefetched first batch belongs to step 0 of a fresh start
        self._stream = resumed_stream(self.train_data, position, self.step)

    def keep_rollback_point(self) -> None:
        """TrainerView: remember the loop's tallies at this step (a checkpoint of it was just taken; the timer
        holds its stall) for a rollback to it; the newest ROLLBACK_POINTS are kept, and the loop's start."""
        tally = self._tally
        if tally is None:
            return
        timer = self.timer
        timer.flush()  # CUDA: the steps still pending are booked first
        self._points[self.step] = _LoopPoint(dict(timer.totals), timer.steps, len(timer.step_seconds),
                                             len(self.step_samples), tally.timed_samples,
                                             (tally.comm_exposed, tally.comm_hidden), tally.val_loss,
                                             tally.time_to_target, tally.val_time)
        for step in sorted(self._points)[:-ROLLBACK_POINTS]:
            if step != tally.start_step:
                del self._points[step]

    def summary_keys_to_come(self) -> dict[str, Any]:
        """TrainerView: the keys the callbacks' on_fit_end will add to summary.json, as they stand now (the final
        checkpoint records them; `Callback.summary_keys`)."""
        out: dict[str, Any] = {}
        for cb in self.callbacks:
            out.update(cb.summary_keys(self))
        return out

    def rolled_back(self, from_step: int, event: Mapping[str, Any]) -> None:
        """TrainerView: a checkpoint was loaded in the loop at `from_step` (`self.step` is its step). The steps after
        it will be trained again: their records leave the history and metrics.jsonl (rank 0 moves them to
        rollbacks.jsonl, one line with `event`), the timer, samples and validation figures go back to the values
        at that step, and the callbacks hear of it (`on_rollback`): a reader keyed by step sees each step once."""
        to, tally = self.step, self._tally
        self.history[:] = [r for r in self.history if r["step"] <= to]
        if self.run_dir is not None:
            clock = self._clock(tally) if tally is not None else None
            self.run_dir.roll_back_records(to, {**event, "time_s": clock})
        point = self._points.get(to)
        if point is not None and tally is not None:
            timer = self.timer
            timer.flush()
            timer.totals.clear()
            timer.totals.update(point.totals)
            timer.steps = point.timed
            del timer.step_seconds[point.walls:]
            del self.step_samples[point.samples:]
            tally.timed_samples = point.timed_samples
            tally.comm_exposed, tally.comm_hidden = point.comm
            tally.val_loss, tally.time_to_target, tally.val_time = point.val_loss, point.time_to_target, point.val_time
        elif tally is not None:  # a checkpoint older than the tallies kept: the figures keep the rolled-back steps
            log.warning("stride.train: rolled back to step %d, older than the loop tallies kept: summary.json's "
                        "timed_steps and throughput still count the %d rolled-back steps", to, from_step - to)
        for step in [s for s in self._points if s > to]:
            del self._points[step]
        for cb in self.callbacks:
            if overrides(cb, "on_rollback"):
                cb.on_rollback(self, from_step)

    # -- the step -------------------------------------------------------------------------
    def _to_device(self, batch: Batch) -> Batch:
        x, y = batch
        if self._on_host and x.is_cpu and y.is_cpu:  # a CPU run's CPU batch: no .to a step
            return (x.float(), y) if x.dtype == torch.bfloat16 and self.precision.name == "fp32" else (x, y)
        nb = self.device.type == "cuda"
        x = x.to(self.device, non_blocking=nb)
        if x.dtype == torch.bfloat16 and self.precision.name == "fp32":
            x = x.float()  # bf16 batches (data.batch_dtype): half the bytes moved, upcast on the device
        return x, y.to(self.device, non_blocking=nb)

    def evaluate(self, model: nn.Module | None = None) -> float:
        """Mean validation loss over the first `train.val_batches` batches."""
        return validation_loss(self, self.model if model is None else model)

    # -- set-up: everything fit() needs, built once ------------------------------------------
    def setup(self) -> None:
        """Count FLOPs, apply techniques in order, build optimizer and schedule. Idempotent.

        Split from fit() so a checkpoint callback can load state (`load_state_dict`, `resume_data`, the
        model's and optimizer's tensors) after set-up and before the first step.
        """
        if self._is_setup:
            return
        cfg, t = self.cfg, self.cfg.train
        self._stream = endless(self.train_data)
        _, first = next(self._stream)
        self._pending = self._to_device(self.par.local_batch(*first))
        x0, y0 = self._pending
        # FLOPs are counted on one micro-batch of this size (per rank); a first batch of fewer rows than grad_accum:
        # on all of it, once (it trains as that many one-row micro-batches, FLOPs being linear in the rows)
        micro = len(x0) // t.grad_accum
        counted_rows, times = (micro, t.grad_accum) if micro else (len(x0), 1)
        # Data-parallel replicas: every one trains a batch of this rank's size (`local_batch` refuses another size,
        # and the layout check makes train.batch_size divide by dp x grad_accum), so a step's samples over all ranks
        # are this rank's x dp: counted from each batch's length on the host, no collective.
        self._dp = self.par.layout.dp if self.par.enabled else 1
        self.flops_samples = counted_rows * times * self._dp  # the samples of the step the FLOPs are counted on
        check_output(self.model, self.loss_fn, cfg, x0, y0, self.precision.autocast)  # stride.train.output_check
        # Timesteps per sample: T of a [B, T, F] window, or of a [B, T] token sequence.
        self.seq_len = x0.shape[1] if x0.dim() >= 3 or (x0.dim() == 2 and not x0.is_floating_point()) else 1
        self.n_params = sum(p.numel() for p in self.model.parameters())  # the full model's
        # FLOPs and the peak, once, on the raw model (before TP, AC and compile).
        flops = None
        if self.par.pipelined:
            # Cut into pipeline stages first (this rank keeps its stages' parts): FLOPs are counted per
            # stage, and TP / AC / compile / FSDP below apply to the stages.
            flops = self.par.split_pipeline(self.model, x0, y0, self.loss_fn, cfg.metrics.flops,
                                            self.precision.autocast)
        elif cfg.metrics.flops:
            flops = count_train_flops(self.model, self.loss_fn, x0[:counted_rows], y0[:counted_rows]) * times
        self.flops_per_step = self.par.rank_flops(flops)  # counted before TP: the TP group's, shared by its ranks
        # the dtype the matmuls run in: autocast's, or FSDP2's mp_param_dtype under fp32 autocast (MFU's peak)
        self.compute_precision = compute_precision(t.precision, self.par.layout if self.par.enabled else None,
                                                   cfg.parallel.mp_param_dtype)
        self.peak = device_peak(self.device, self.compute_precision, cfg.metrics.peak_flops)
        # Techniques applied from outside, in the documented order (see stride.train.apply).
        self.n_tp = self.par.apply_tp(self.model)
        self.n_ac = apply_activation_checkpointing(self.model, t.activation_checkpointing, t.ac_every)
        if self.par.pipelined:
            self.par.build_pipeline(self.model, self.loss_fn)  # compile per block, FSDP / DDP per stage
            self.wrapped = self.model
        else:
            self.wrapped = self.par.apply_data_parallel(self.model, apply_compile(self.model, t.compile))
        compile_opt = t.compile == "model+optimizer"
        self.optimizer = build_optimizer(
            self.model.parameters(), self.par.optim_config(cfg.optim, self.model), tensor_lr=compile_opt
        )
        self.scheduler = build_scheduler(self.optimizer, t.steps, cfg.optim)
        self._opt_step = compiled_step(self.optimizer) if compile_opt else self.optimizer.step
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self.timer = StepTimer(self.device)
        # The common step (one process, one micro-step, no pipeline, fp32, no comm timer): `_plain_step` runs the
        # same torch calls in the same order without the general step's per-step branches, context managers and
        # wrapper calls (~12 Python calls a step: after the step's torch work their code is cold, 1-2 us each).
        self._measures = t.compile == "off" and not self.n_tp  # saved activations (not under TP: DTensors have no
        # storage to measure) on the first micro-step
        self._plain = (not self.par.enabled and self.par.pipeline is None and self.par.comm_timer is None
                       and t.grad_accum == 1 and self.precision.scaler is None and self.precision.name == "fp32")
        # one process on the host: a CPU batch goes as it is (`local_batch` and `_to_device` would hand it back)
        self._host_batches = self._on_host and not self.par.enabled
        self._is_setup = True

    def next_batch(self) -> Batch:
        if self._pending is not None:
            batch, self._pending = self._pending, None
            return batch
        x, y = next(self._stream)[1]
        if self._host_batches and x.is_cpu and y.is_cpu and x.dtype != torch.bfloat16:
            return x, y  # what `_to_device(local_batch(x, y))` returns here, without the two calls
        return self._to_device(self.par.local_batch(x, y))

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One optimizer step over the global batch (x, y) in grad_accum micro-batches; returns the loss."""
        if self._plain and (self.saved_activation_bytes is not None or not self._measures) and not profiling_active():
            return self._plain_step(x, y)
        t, timer, accum = self.cfg.train, self.timer, self.cfg.train.grad_accum
        rows = x.shape[0]  # not len(): a tensor's __len__ is a slower call, every step
        # One micro-step: the loss is the step's loss as it is (no zeros, division or sum: 3 tensor ops
        # and a DivBackward node a step, ~18 us, for the same bits); accumulation sums loss / accum.
        loss_sum = torch.zeros((), device=self.device) if accum > 1 else None
        if self.par.comm_timer is not None:
            self.par.comm_timer.reset()
        if self.par.pipeline is not None:
            # One schedule over grad_accum x microbatches; forward and backward interleave, so the
            # phases are the stages' compute and the rest of the schedule's time ("pipeline_wait").
            with phase_range("stride.pipeline"), self.precision.autocast():
                loss_sum = self.par.pipeline.train_step(x, y)
            compute = self.par.pipeline.compute_seconds()
            timer.mark_split("pipeline_wait", compute if self.device.type == "cpu" else {})
            accum = 0  # no micro-step loop below
        # every row once, in micro-batches of nearly equal size (stride.train.micro_batches)
        bounds = micro_batches(rows, accum) if accum else ()
        last = len(bounds) - 1
        for i, (lo, hi) in enumerate(bounds):
            # Gradients are communicated on the last micro-step only (DDP no_sync / FSDP2 sync off).
            with self.par.grad_sync(i == last) if self.par.enabled else _NULL:
                xm, ym = (x, y) if accum == 1 else (x[lo:hi], y[lo:hi])
                measure = self.saved_activation_bytes is None and self._measures
                saved = SavedActivations(self.model) if measure else None
                with phase_range("stride.forward"):
                    if saved is not None:
                        saved.__enter__()
                    with self.precision.autocast():
                        loss = micro_loss(self.loss_fn(self.wrapped(xm), ym), lo, hi, rows, accum)
                    if saved is not None:
                        saved.__exit__(None, None, None)
                        self.saved_activation_bytes = saved.bytes
                timer.mark("forward")
                with phase_range("stride.backward"):
                    self.precision.backward(loss)
                if loss_sum is None:
                    loss_sum = loss.detach()
                else:
                    loss_sum += loss.detach()
                timer.mark("backward")
        assert loss_sum is not None
        with phase_range("stride.optimizer"):
            grad_norm = None
            if t.grad_clip is not None:
                self.precision.unscale(self.optimizer)
                grad_norm = self.par.clip_grad_norm(self._params, t.grad_clip)  # DTensor-aware
                self._last_grad_norm = grad_norm
            if self._gates and not self._allow_update(loss_sum, grad_norm):
                self.skipped_steps += 1  # e.g. the checkpoint callback's guard: a non-finite loss or grad norm
                self.precision.skip(self.optimizer)  # fp16: the scaler's step ends here too
            elif not self.precision.step(self.optimizer, self._opt_step):
                self.skipped_steps += 1
            self.optimizer.zero_grad(set_to_none=True)
            self.scheduler.step()
        timer.mark("optimizer")
        return loss_sum

    def _plain_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`train_step` where `_plain` holds, the activations are measured (or cannot be) and no profiler records:
        the same torch calls in the same order (fp32 autocast, the profiler ranges and grad sync are no-ops here;
        the loss is scaled by nothing; one process clips with torch's own), so the same bits."""
        timer = self.timer
        loss = self.loss_fn(self.wrapped(x), y)
        timer.mark("forward")
        loss.backward()
        loss_sum = loss.detach()
        timer.mark("backward")
        clip = self.cfg.train.grad_clip
        grad_norm = torch.nn.utils.clip_grad_norm_(self._params, clip, foreach=True) if clip is not None else None
        self._last_grad_norm = grad_norm
        if self._gates and not self._allow_update(loss_sum, grad_norm):
            self.skipped_steps += 1
        else:
            self._opt_step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        timer.mark("optimizer")
        return loss_sum

    def _allow_update(self, loss: torch.Tensor, grad_norm: torch.Tensor | None) -> bool:
        ok = True
        for cb in self._gates:  # every gate is asked: one may take part in a vote all ranks must reach
            ok = cb.before_optimizer_step(self, loss, grad_norm) and ok
        return ok

    # -- the loop -----------------------------------------------------------------------------
    def fit(self) -> TrainResult:
        """Train to `train.steps`. The run folder is let go however fit() ends (no waiting for garbage collection)."""
        # Rank 0's run folder, locked, nothing written yet; an earlier run that checkpoints will not continue is
        # refused unless `overwrite` (stride.checkpoint.rerun).
        run = self.run_dir = (open_run_folder(self.cfg, self.out, self.overwrite)
                              if self.write_run_dir and self.par.is_rank0 else None)
        started: list[Callback] = []
        try:
            return self._fit(run, started)
        except RunFinished as done:  # the folder holds this run, finished: nothing trained, nothing written
            abort_callbacks(self, started, done)
            return TrainResult(done.summary, run.path if run else None, already_finished=str(done))
        except BaseException as exc:
            abort_callbacks(self, started, exc)
            raise
        finally:
            if run is not None:
                run.close()  # a run that wrote nothing (a refused resume) leaves the folder as it was

    def _fit(self, run: RunDir | None, started: list[Callback]) -> TrainResult:
        t = self.cfg.train
        self.setup()
        for cb in self.callbacks:
            started.append(cb)
            cb.on_fit_start(self)  # the checkpoint callback loads here, or finds the run finished or refused
        if run is not None:
            # config.toml and env.json once the run is accepted; a resume's wait for its first own write
            run.record(config_to_toml(self.cfg), resumed=self.step > 0)
        progress = TrainProgress(t.steps, self.cfg.metrics.progress and self.par.is_rank0, t.name)
        reset_peak(self.device)
        self.wrapped.train()
        loss_sum = torch.full((), math.nan)
        tally = LoopTally(t_start=time.perf_counter(), start_step=self.step)  # a resumed run counts from its checkpoint
        if not self._time_loaded:
            self._time_before = 0.0  # a fresh run (a resumed one continues its checkpoint's clock, if it has one)
        elif self.step > 0:
            self._lost_time = self._add_lost_segment(run)
        self._clock_start, self._clock_stop = tally.t_start, None
        self._tally, self._points = tally, {}
        self.keep_rollback_point()  # where a rollback to the checkpoint resumed (or step 0's) leaves the tallies
        waits = ContentionClock()
        waits.start()
        tally.time_before, tally.lost_time = self._time_before, self._lost_time
        try:
            while self.step < t.steps:
                self.timer.start_step()
                self.par.begin_step(self.step + 1)  # named if a collective hangs (stride.parallel.watchdog)
                with phase_range("stride.data"):
                    x, y = self.next_batch()
                self.timer.mark("data")
                loss_sum = self.train_step(x, y)
                self.step += 1
                self._losses.add(self.step, loss_sum)
                parts = self._end_step_timing(tally, x.shape[0])
                progress.advance(self.step)
                self._log_step(parts, tally, progress)
                if self.diverged_at is not None:
                    break
                self._validate(tally)
                for cb in self._step_enders:
                    cb.on_step_end(self)
                if tally.time_to_target is not None:
                    break
            if self._losses.active and self._losses.pending:  # stopped at its target between logged steps
                self.diverged_at = self._losses.read(self.par)[1]
        finally:
            progress.close()
            self._tally = None
        self._clock_stop = time.perf_counter()
        tally.wall = self._clock_stop - tally.t_start
        tally.waiting_threads = waits.waiting_threads()
        summary = run_summary(self, tally, loss_sum)
        if summary.get("contention_note") and self.par.is_rank0:
            warn_contended(log, summary["contention_note"], summary.get("run_queue_waiting_threads"))
        if self.diverged_at is not None:  # no on_fit_end: the callbacks are aborted (no final checkpoint)
            error = diverged(summary, self.diverged_at, run.path if run else None)
            if run is not None:
                run.write_json("summary.json", summary)
            raise error
        # The run's own callbacks end first (the checkpoint callback's final save and its summary keys), then
        # summary.json is written, and only then do the sinks copy the run elsewhere (TensorBoard, Prometheus,
        # MLflow, W&B): a sink failing at the end (MLflow's store on a full disk) cannot cost summary.json (outside
        # audit of the sinks: it did). What the sinks add (their run ids, a failure) is written over it after.
        sinks = [cb for cb in self.callbacks if isinstance(cb, Sink)]
        for cb in self.callbacks:
            if not isinstance(cb, Sink):
                cb.on_fit_end(self, summary)
        if run is not None:
            _hold_before_summary()
            run.write_json("summary.json", summary)
        if sinks:
            for cb in sinks:
                cb.on_fit_end(self, summary)
            if run is not None:
                run.write_json("summary.json", summary)
        return TrainResult(summary, run.path if run else None, list(self.history))

    def data_changed_in_place(self) -> list[str] | None:
        """TrainerView: files of the config's data store written in place since this trainer mapped them (None: a
        caller's data, not checked)."""
        if self._data_maps is None:
            return None
        return mapped_files.mapped_changes(in_place_only=True, tokens=self._data_maps)

    def _end_step_timing(self, tally: LoopTally, rows: int | None = None) -> dict[str, float]:
        """Close the step's timer; steps after the warm-up count towards throughput and the breakdown. `rows`: the
        length of this rank's batch (`x.shape[0]`, known on the host): the step trained all of it (`train_step` splits
        a batch that grad_accum does not divide into micro-batches of nearly equal size), on each data-parallel rank.
        None (a caller without the batch: benchmarks/overhead_sources.py times this loop body across versions):
        `train.batch_size`."""
        t, skip, timer = self.cfg.train, self.cfg.metrics.skip_steps, self.timer
        record = self.step - tally.start_step > skip or t.steps - tally.start_step <= skip  # warm-up of this process
        # CUDA: the step's events resolve (one host sync) only where their figures are read: log
        # steps, the last step, and steps a profiler traces (stride.metrics.step_timer); a timer that
        # does not defer resolves every step whatever it is told
        resolve = not timer.defer or not self.step % self.cfg.metrics.log_every or self.step >= t.steps \
            or profiling_active()
        parts = timer.end_step(record=record, resolve=resolve)
        samples = t.batch_size if rows is None else rows * self._dp
        self.step_samples.append(samples)
        if record:
            tally.timed_samples += samples  # global: every data-parallel rank's samples
            if self.par.comm_timer is not None:
                exposed, hidden = self.par.comm_timer.split()
                tally.comm_exposed, tally.comm_hidden = tally.comm_exposed + exposed, tally.comm_hidden + hidden
        return parts

    def _log_step(self, parts: dict[str, float], tally: LoopTally, progress: TrainProgress) -> None:
        t, step = self.cfg.train, self.step
        if step % self.cfg.metrics.log_every and step != t.steps:
            return
        loss, self.diverged_at = self._losses.read(self.par)  # averaged over ranks
        rec = {
            "step": step,
            "loss": loss,
            "lr": trained_lr(self.scheduler),  # the rate this step ran at, not the next one's
            # the global gradient norm before clipping (train.grad_clip set: the clip computes it anyway; one more
            # scalar read on a log step, after the loss's)
            **({"grad_norm": float(self._last_grad_norm)} if self._last_grad_norm is not None else {}),
            "step_time_s": parts["total"],
            "breakdown_s": {k: v for k, v in parts.items() if k != "total"},
            # the step's own batch (train.batch_size where no step has ended: a caller timing this method alone)
            "samples_per_s": (self.step_samples[-1] if self.step_samples else t.batch_size) / parts["total"]
            if parts["total"] else None,
            "time_s": self._clock(tally),  # the run's training clock (continued across resumes)
        }
        self._log(rec)
        progress.log(step, loss, rec["samples_per_s"] or 0.0)

    def _validate(self, tally: LoopTally) -> None:
        """Every `train.val_every` steps and at the last: validation loss, and the time the target was reached."""
        t, step = self.cfg.train, self.step
        if self.val_data is None or not t.validates or (step % t.val_every and step != t.steps):
            return
        v0 = time.perf_counter()
        tally.val_loss = self.evaluate(self.wrapped)
        tally.val_time += time.perf_counter() - v0
        now = self._clock(tally)
        self._log({"step": step, "val_loss": tally.val_loss, "time_s": now})
        if t.target_val_loss is not None and tally.time_to_target is None and tally.val_loss <= t.target_val_loss:
            tally.time_to_target = now

    def _log(self, rec: dict[str, Any]) -> None:
        self.history.append(rec)
        if self.run_dir is not None:
            self.run_dir.log(rec)
        for cb in self._loggers:
            cb.on_log(self, rec)


HOLD_BEFORE_SUMMARY = "STRIDE_TEST_HOLD_BEFORE_SUMMARY"


def _hold_before_summary() -> None:
    """Tests only (unset, the default: one environment lookup at the run's end). `STRIDE_TEST_HOLD_BEFORE_SUMMARY=PATH`
    writes this process's id to PATH and waits (up to 600 s) between the final checkpoint's commit and summary.json's
    write, so a test can kill the process in that window (tests/checkpoint/test_checkpoint_summary_window.py)."""
    path = os.environ.get(HOLD_BEFORE_SUMMARY)
    if path:
        Path(path).write_text(str(os.getpid()))
        time.sleep(600)


def _seconds(v: Any) -> float | None:
    """A checkpoint's training clock: a finite number of seconds >= 0, else unknown (None: an older checkpoint)."""
    if finite_number(v) and v >= 0:
        return float(v)
    return None
