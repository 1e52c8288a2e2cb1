"""The trainer: a lean loop where every efficiency technique is a config switch.

Bring your own model and data (`Trainer(model=..., train_data=..., config=...)`) or let `[model]`
and `[data]` build them. The loop measures itself: every step is split into data wait, forward,
backward and optimizer (the rest is "other"), FLOPs are counted once for MFU, and a run directory
records config, environment, metrics.jsonl and summary.json.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.profiler import record_function

from stride.config import RunConfig, config_hash, config_to_toml
from stride.config.validate import validate
from stride.data.build import build_data
from stride.metrics.env import fingerprint
from stride.metrics.flops import count_train_flops
from stride.metrics.hashing import params_sha256
from stride.metrics.memory import SavedActivations, peak_memory, reset_peak
from stride.metrics.peak import device_peak, mfu_fields
from stride.metrics.run_dir import RunDir
from stride.metrics.step_timer import StepTimer
from stride.models.losses import make_loss
from stride.models.registry import build_model
from stride.optim.factory import build_optimizer, compiled_step
from stride.parallel.context import Parallel
from stride.train.apply import apply_activation_checkpointing, apply_compile
from stride.train.batches import Batch, as_batches, endless
from stride.train.device import configure_process, resolve_device
from stride.train.kernels_apply import apply_kernels, kernel_loss
from stride.train.precision import Precision
from stride.train.progress import TrainProgress
from stride.train.schedule import build_scheduler

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class Callback:
    """Hooks into fit(): checkpointing, fault handling and observers subclass this."""

    def on_fit_start(self, trainer: Trainer) -> None:  # after setup(), before the first step
        pass

    def on_step_end(self, trainer: Trainer) -> None:  # after each optimizer step, logging and validation
        pass

    def on_fit_end(self, trainer: Trainer, summary: dict[str, Any]) -> None:  # may add keys to summary
        pass


@dataclass
class TrainResult:
    summary: dict[str, Any]
    run_dir: Path | None
    history: list[dict[str, Any]] = field(default_factory=list)


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
        callbacks: list[Callback] | None = None,
    ) -> None:
        self.cfg = config if config is not None else RunConfig()
        validate(self.cfg)
        t = self.cfg.train
        self.device = Parallel.device_for(resolve_device(t.device))  # cuda:LOCAL_RANK under a launcher
        configure_process(t, self.device)
        bundle = None
        if model is None or train_data is None:
            bundle = build_data(self.cfg.data, t.batch_size)
            train_data = train_data if train_data is not None else bundle.train
            val_data = val_data if val_data is not None else bundle.val
        if model is None:
            assert bundle is not None
            model = build_model(self.cfg.model, bundle.n_features, bundle.seq_len, bundle.n_horizons)
        self.model = model.to(self.device)  # the raw module: hashing, FLOPs, state dicts
        self.kernels_impl, self.kernel_modules = apply_kernels(self.model, t.kernels)
        if loss_fn is None and getattr(model, "loss", None) is None:
            loss_fn = kernel_loss(t.kernels, self.cfg.model)
        if loss_fn is None:
            m = self.cfg.model
            loss_fn = getattr(model, "loss", None) or make_loss(
                m.loss, huber_delta=m.huber_delta, quantiles=m.quantiles
            )
        self.loss_fn = loss_fn
        # Layout checked before any process group; then mesh (N > 1 processes) and per-rank data.
        self.par = Parallel.create(self.cfg, self.model, self.device, self.cfg.data.seq_len // self.cfg.model.patch_len)
        self.train_data = self.par.shard_data(as_batches(train_data, t.batch_size, t.seed))
        self.val_data = as_batches(val_data, t.batch_size, t.seed, shuffle=False) if val_data is not None else None
        self.precision = Precision(t.precision, self.device)
        self.out = out
        self.write_run_dir = write_run_dir
        self.callbacks: list[Callback] = list(callbacks or [])
        self.step_guard: Any = None  # stride.checkpoint.StepGuard, set by the checkpoint callback
        if self.cfg.checkpoint.enabled:
            from stride.checkpoint import CheckpointCallback  # lazy: stride.checkpoint imports this module

            if not any(isinstance(cb, CheckpointCallback) for cb in self.callbacks):
                self.callbacks.append(CheckpointCallback())
        from stride.metrics.observe import build_observers  # lazy: observers subclass Callback from here

        self.callbacks += build_observers(self.cfg)
        self.step = 0  # optimizer steps taken; a resumed run starts from the loaded value
        self.skipped_steps = 0
        self.saved_activation_bytes: int | None = None
        self.history: list[dict[str, Any]] = []
        self.run_dir: RunDir | None = None
        self._pending: Batch | None = None
        self._is_setup = False

    # -- the step -------------------------------------------------------------------------
    def _to_device(self, batch: Batch) -> Batch:
        x, y = batch
        nb = self.device.type == "cuda"
        x = x.to(self.device, non_blocking=nb)
        if x.dtype == torch.bfloat16 and self.precision.name == "fp32":
            x = x.float()  # bf16 batches (data.batch_dtype): half the bytes moved, upcast on the device
        return x, y.to(self.device, non_blocking=nb)

    def evaluate(self, model: nn.Module | None = None) -> float:
        """Mean validation loss over the first `train.val_batches` batches."""
        model = self.model if model is None else model
        assert self.val_data is not None
        model.eval()
        total, n = 0.0, 0
        with torch.no_grad():
            for i, batch in enumerate(self.val_data):
                if i >= self.cfg.train.val_batches:
                    break
                x, y = self._to_device(batch)
                with self.precision.autocast():
                    loss = self._val_loss(model, x, y)
                total += float(loss) * len(x)
                n += len(x)
        model.train()
        return total / max(n, 1)

    def _val_loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        pipe = self.par.pipeline
        if pipe is None:
            return self.loss_fn(model(x), y)
        out = pipe.forward_only(x)  # the stages in order, forward only (stride.parallel.pipeline)
        return pipe.share(self.loss_fn(out, y) if out is not None else torch.zeros((), device=self.device))

    # -- set-up: everything fit() needs, built once ------------------------------------------
    def setup(self) -> None:
        """Count FLOPs, apply techniques in order, build optimizer and schedule. Idempotent.

        Split from fit() so a checkpoint callback can load state into `optimizer`, `scheduler`,
        `train_data` and `step` after set-up and before the first step.
        """
        if self._is_setup:
            return
        cfg, t = self.cfg, self.cfg.train
        self.stream = endless(self.train_data)
        _, first = next(self.stream)
        self._pending = self._to_device(self.par.local_batch(*first))
        micro = len(self._pending[0]) // t.grad_accum  # per rank
        x0, y0 = self._pending
        # Timesteps per sample: T of a [B, T, F] window, or of a [B, T] token sequence.
        self.seq_len = x0.shape[1] if x0.dim() >= 3 or (x0.dim() == 2 and not x0.is_floating_point()) else 1
        self.n_params = sum(p.numel() for p in self.model.parameters())  # the full model's
        # FLOPs and the peak, once, on the raw model (before AC and compile).
        self.flops_per_step = None
        if self.par.pipelined:
            # Cut into pipeline stages first (this rank keeps its stages' parts): FLOPs are counted per
            # stage, and TP / AC / compile / FSDP below apply to the stages.
            self.flops_per_step = self.par.split_pipeline(self.model, x0, y0, self.loss_fn, cfg.metrics.flops,
                                                          self.precision.autocast)
        elif cfg.metrics.flops:
            self.flops_per_step = count_train_flops(self.model, self.loss_fn, x0[:micro], y0[:micro]) * t.grad_accum
        self.peak = device_peak(self.device, t.precision, cfg.metrics.peak_flops)
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
        self._is_setup = True

    def next_batch(self) -> Batch:
        if self._pending is not None:
            batch, self._pending = self._pending, None
            return batch
        return self._to_device(self.par.local_batch(*next(self.stream)[1]))

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One optimizer step over the global batch (x, y) in grad_accum micro-batches; returns the loss."""
        t, timer, accum = self.cfg.train, self.timer, self.cfg.train.grad_accum
        micro = len(x) // accum
        loss_sum = torch.zeros((), device=self.device)
        if self.par.comm_timer is not None:
            self.par.comm_timer.reset()
        if self.par.pipeline is not None:
            # One schedule over grad_accum x microbatches; forward and backward interleave, so the
            # phases are the stages' compute and the rest of the schedule's time ("pipeline_wait").
            with record_function("stride.pipeline"), self.precision.autocast():
                loss_sum = self.par.pipeline.train_step(x, y)
            compute = self.par.pipeline.compute_seconds()
            timer.mark_split("pipeline_wait", compute if self.device.type == "cpu" else {})
            accum = 0  # no micro-step loop below
        for i in range(accum):
            # Gradients are communicated on the last micro-step only (DDP no_sync / FSDP2 sync off).
            with self.par.grad_sync(i == accum - 1):
                xm, ym = (x, y) if accum == 1 else (x[i * micro : (i + 1) * micro], y[i * micro : (i + 1) * micro])
                # (not under TP: saved DTensors have no storage to measure)
                measure = self.saved_activation_bytes is None and t.compile == "off" and not self.n_tp
                saved = SavedActivations() if measure else None
                with record_function("stride.forward"):
                    if saved is not None:
                        saved.__enter__()
                    with self.precision.autocast():
                        loss = self.loss_fn(self.wrapped(xm), ym) / accum
                    if saved is not None:
                        saved.__exit__(None, None, None)
                        self.saved_activation_bytes = saved.bytes
                timer.mark("forward")
                with record_function("stride.backward"):
                    self.precision.backward(loss)
                loss_sum += loss.detach()
                timer.mark("backward")
        with record_function("stride.optimizer"):
            grad_norm = None
            if t.grad_clip is not None:
                self.precision.unscale(self.optimizer)
                grad_norm = self.par.clip_grad_norm(self._params, t.grad_clip)  # DTensor-aware
            if self.step_guard is not None and not self.step_guard.allow(self, loss_sum, grad_norm):
                self.skipped_steps += 1  # non-finite loss/grad norm or a loss spike: no update
            elif not self.precision.step(self.optimizer, self._opt_step):
                self.skipped_steps += 1
            self.optimizer.zero_grad(set_to_none=True)
            self.scheduler.step()
        timer.mark("optimizer")
        return loss_sum

    def _log(self, run: RunDir | None, rec: dict[str, Any]) -> None:
        self.history.append(rec)
        if run is not None:
            run.log(rec)

    def fit(self) -> TrainResult:
        cfg, t = self.cfg, self.cfg.train
        run = RunDir.create(cfg.metrics.out_dir, t.name, self.out) if self.write_run_dir and self.par.is_rank0 else None
        self.run_dir = run
        if run is not None:
            run.write_text("config.toml", config_to_toml(cfg))
            run.write_json("env.json", fingerprint())
        self.setup()
        for cb in self.callbacks:
            cb.on_fit_start(self)
        timer = self.timer
        progress = TrainProgress(t.steps, cfg.metrics.progress and self.par.is_rank0, t.name)
        reset_peak(self.device)
        self.wrapped.train()
        val_loss: float | None = None
        time_to_target: float | None = None
        val_time = 0.0
        timed_samples = 0
        comm_exposed = comm_hidden = 0.0  # DDP all-reduce seconds over timed steps (CPU)
        loss_sum = torch.full((), math.nan)
        t_start = time.perf_counter()
        try:
            while self.step < t.steps:
                timer.start_step()
                self.par.begin_step(self.step + 1)  # named if a collective hangs (stride.parallel.watchdog)
                with record_function("stride.data"):
                    x, y = self.next_batch()
                timer.mark("data")
                loss_sum = self.train_step(x, y)
                self.step += 1
                step = self.step
                record = step > cfg.metrics.skip_steps or t.steps <= cfg.metrics.skip_steps
                parts = timer.end_step(record=record)
                if record:
                    timed_samples += t.batch_size  # global: every rank's samples
                    if self.par.comm_timer is not None:
                        exposed, hidden = self.par.comm_timer.split()
                        comm_exposed, comm_hidden = comm_exposed + exposed, comm_hidden + hidden
                progress.advance(step)
                if step % cfg.metrics.log_every == 0 or step == t.steps:
                    loss = float(self.par.mean(loss_sum))  # averaged over ranks
                    rec = {
                        "step": step,
                        "loss": loss,
                        "lr": float(self.optimizer.param_groups[0]["lr"]),
                        "step_time_s": parts["total"],
                        "breakdown_s": {k: v for k, v in parts.items() if k != "total"},
                        "samples_per_s": t.batch_size / parts["total"] if parts["total"] else None,
                        "time_s": time.perf_counter() - t_start,
                    }
                    self._log(run, rec)
                    progress.log(step, loss, rec["samples_per_s"] or 0.0)
                if self.val_data is not None and t.val_every and (step % t.val_every == 0 or step == t.steps):
                    v0 = time.perf_counter()
                    val_loss = self.evaluate(self.wrapped)
                    val_time += time.perf_counter() - v0
                    now = time.perf_counter() - t_start
                    self._log(run, {"step": step, "val_loss": val_loss, "time_s": now})
                    if t.target_val_loss is not None and time_to_target is None and val_loss <= t.target_val_loss:
                        time_to_target = now
                for cb in self.callbacks:
                    cb.on_step_end(self)
                if time_to_target is not None:
                    break
        finally:
            progress.close()
        wall = time.perf_counter() - t_start

        breakdown = timer.mean()
        step_s = breakdown["total"]
        samples_per_s = timed_samples / timer.totals["total"] if timer.totals.get("total") else None
        achieved = self.flops_per_step / step_s if self.flops_per_step and step_s else None
        mem, mem_kind = peak_memory(self.device)
        summary: dict[str, Any] = {
            "name": t.name,
            "steps": self.step,
            "final_train_loss": float(self.par.mean(loss_sum)),  # last step, mean over ranks
            "final_val_loss": val_loss,
            "samples_per_s": samples_per_s,
            "timesteps_per_s": samples_per_s * self.seq_len if samples_per_s else None,
            "step_time_s": step_s,
            "step_time_breakdown_s": {k: v for k, v in breakdown.items() if k != "total"},
            "timed_steps": timer.steps,
            "flops_per_step": self.flops_per_step,
            "achieved_flops_per_s": achieved,
            **mfu_fields(achieved, self.peak),  # peak_flops_per_s, peak_flops_source, mfu, mfu_error
            "peak_mem_bytes": mem,
            "peak_mem_kind": mem_kind,
            "saved_activation_bytes": self.saved_activation_bytes,
            "activation_checkpointed_blocks": self.n_ac,
            "time_to_target_s": time_to_target,
            "target_val_loss": t.target_val_loss,
            "wall_time_s": wall,
            "val_time_s": val_time,
            "skipped_steps": self.skipped_steps,
            "loss_scale": self.precision.scaler.get_scale() if self.precision.scaler else None,
            "world_size": self.par.world_size,
            "parallel": self.par.layout.strategy,
            "per_rank_samples_per_s": samples_per_s / self.par.world_size if samples_per_s else None,
            # Exposed: backward waited on the all-reduce (part of "backward"); hidden: overlapped compute.
            "comm_exposed_s": comm_exposed / timer.steps if self.par.comm_timer and timer.steps else None,
            "comm_hidden_s": comm_hidden / timer.steps if self.par.comm_timer and timer.steps else None,
            "exposed_comm_fraction": comm_exposed / timer.totals["total"]
            if self.par.comm_timer and timer.totals.get("total")
            else None,
            "device": str(self.device),
            "precision": t.precision,
            "kernels": self.kernels_impl,
            "params": self.n_params,
            "params_sha256": params_sha256(
                self.par.pipeline.full_state(self.model) if self.par.pipeline else self.model
            ),
            "pipeline": self.par.plan_summary(),
            "config_hash": config_hash(cfg),
        }
        for cb in self.callbacks:
            cb.on_fit_end(self, summary)
        if run is not None:
            run.write_json("summary.json", summary)
            run.close()
        return TrainResult(summary, run.path if run else None, list(self.history))
