"""Train a pack of models as one, each model reproducing its own `stride train` run.

The loop is `stride.train.Trainer`'s, per model: the same initialisation (seed, then build), batches
(pack_data.py), loss over grad_accum micro-batches, clipping of the model's own gradient norm, optimizer
step and schedule (packed_optim.py), logging every `metrics.log_every` steps, validation every
`train.val_every` steps and at the model's last step over the first `train.val_batches` batches, and the
stop at `train.target_val_loss`. A model stops when its own steps are done, when it reaches its target,
or when its loss or gradient norm is not finite: then it is masked (no update, its state kept as of its
last finite step), reported as diverged, and the others go on untouched (nothing in a step mixes models).

A step runs the pack chunk by chunk (`chunk` models at a time; default: the whole pack on a GPU, at most 16
models on a CPU, stride.sweep.packed_model.default_chunk): forward, backward, clipping, the masks and the
optimizer update of one chunk before the next, so the activations autograd keeps are a chunk's, not the
pack's (64 `ts_transformer_tiny` in chunks of 16: 1.6 GiB peak and 47 % less CPU per model-step than all 64
at once, 3.6 GiB; at N = 16 smaller chunks cost 8-16 %, AMD EPYC; docs/sweep.md). A chunk whose models have
all stopped is skipped. The masks live on the device (`alive`, `diverged_at`): the host reads them, and the
per-model losses, only where it needs them (log steps, validation steps, a model's last step, the end), so
a GPU step has no host synchronisation in between.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.profiler import record_function

from stride.config import RunConfig, config_hash
from stride.config.errors import ConfigError
from stride.metrics.hashing import params_sha256
from stride.metrics.memory import peak_memory, reset_peak
from stride.models.registry import build_model
from stride.sweep.pack_data import PackData
from stride.sweep.packed_loss import PackedLoss
from stride.sweep.packed_model import Chunk, PackedModel, chunk_bounds, default_chunk
from stride.sweep.packed_optim import PackedOptimizer, max_norms
from stride.sweep.packing import check_packable, pack_key, split_keys
from stride.train.device import resolve_device, seed_everything
from stride.train.micro_batches import micro_batches, micro_loss
from stride.train.precision import Precision


@dataclass
class ModelRecord:
    """What one model of the pack did: its summary, log and (when asked) final state."""

    summary: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)


class PackedTrainer:
    """`configs` must be pack-compatible (stride.sweep.packing). `train_data`/`val_data` as `Trainer` takes them."""

    def __init__(self, configs: list[RunConfig], *, train_data: Any = None, val_data: Any = None,
                 dtype: torch.dtype | None = None, chunk: int | None = None) -> None:
        if not configs:
            raise ConfigError("a pack needs at least one config")
        for c in configs:
            check_packable(c)
        if len({pack_key(c) for c in configs}) > 1:
            raise ConfigError(f"these configs cannot share a pack: they differ in {', '.join(split_keys(configs))}")
        self.cfgs = configs
        self.n = len(configs)
        t = configs[0].train
        self.device = resolve_device(t.device)
        if t.threads is not None:
            torch.set_num_threads(t.threads)
        if t.deterministic:
            torch.use_deterministic_algorithms(True)
        self.precision = Precision(t.precision, self.device)
        seed_everything(t.seed)
        before = torch.get_rng_state()
        self.data = PackData(configs, train_data, val_data)
        if not torch.equal(before, torch.get_rng_state()):
            # `stride train` builds the data after seeding and before the model: a source that draws from the
            # global generator moves where the model's initialisation starts, which the pack cannot repeat
            warnings.warn("the data source draws from torch's global generator while it is built: packed models "
                          "start from other initial weights than their solo runs", stacklevel=2)
        models = []
        for i, c in enumerate(configs):
            seed_everything(c.train.seed)  # as Trainer: seed, then build (the data sources draw nothing global)
            m = build_model(c.model, *self.data.dims(i))
            if getattr(m, "loss", None) is not None:
                raise ConfigError(f"`model.name` = {c.model.name!r} brings its own loss; packed training uses "
                                  "[model] loss (mse, huber, quantile); train it with --pack 1")
            models.append(m.to(self.device) if dtype is None else m.to(self.device, dtype))
        sample = self._sample(models[0])
        self.model = PackedModel(models, [c.model.dropout for c in configs], sample,
                                 seeds=[c.train.seed for c in configs])  # masks: each model's own generator
        del models
        self.loss = PackedLoss([c.model for c in configs], self.device)
        self.optimizer = PackedOptimizer(self.model.flat, self.model.grad, [c.optim for c in configs],
                                         [c.train.steps for c in configs])
        self.chunk_size = min(chunk or default_chunk(self.n, self.device), self.n)
        self.chunks = [self.model.chunk(lo, hi) for lo, hi in chunk_bounds(self.n, self.chunk_size)]
        self.max_norm = max_norms([c.train.grad_clip for c in configs], self.device)
        self.step = 0
        self.records = [ModelRecord({}) for _ in configs]
        self.stopped: list[str | None] = [None] * self.n  # why model i stopped: done | target | diverged
        self.last_step = [0] * self.n
        self.last_loss: list[float | None] = [None] * self.n
        self.val_loss: list[float | None] = [None] * self.n
        self.time_to_target: list[float | None] = [None] * self.n
        self.diverged_at: list[int | None] = [None] * self.n
        # on the device, read by the host at sync points only: not diverged; the step a model diverged at (0:
        # never); its loss at the last step it was updated
        self.alive = torch.ones(self.n, dtype=torch.bool, device=self.device)
        self.diverged_at_t = torch.zeros(self.n, dtype=torch.int64, device=self.device)
        self._host_mask = torch.ones(self.n, dtype=torch.bool, device=self.device)
        self._host_mask_of: list[bool] = [True] * self.n
        self.step_times: list[float] = []
        self.val_time = 0.0
        self._t_start: float | None = None
        self._reported: set[int] = set()
        self.wall = 0.0

    def _sample(self, model: torch.nn.Module) -> torch.Tensor:
        """A small input of the model's shape, for probing what its forward calls."""
        n_features, seq_len, _ = self.data.dims(0)
        dtype = next(model.parameters()).dtype
        return torch.zeros(1, seq_len, n_features, dtype=dtype, device=self.device)

    # -- the step --------------------------------------------------------------------------------
    def active(self) -> list[bool]:
        return [s is None for s in self.stopped]

    def _host_active(self) -> list[bool]:
        """Which models the host has not stopped; its device copy is rebuilt only when that changes."""
        active = self.active()
        if active != self._host_mask_of:
            self._host_mask = torch.tensor(active, dtype=torch.bool, device=self.device)
            self._host_mask_of = active
        return active

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One optimizer step of every active model; returns the per-model loss [N] (sum of micro-steps; 0 for
        the models of a skipped chunk)."""
        active = self._host_active()
        losses = []
        for ch in self.chunks:
            if not any(active[ch.lo : ch.hi]):
                losses.append(torch.zeros(ch.size, device=self.device))
                continue
            losses.append(self._chunk_step(ch, x, y, active))
        return torch.cat(losses) if len(losses) > 1 else losses[0]

    def _chunk_step(self, ch: Chunk, x: torch.Tensor, y: torch.Tensor, active: list[bool]) -> torch.Tensor:
        accum = self.cfgs[0].train.grad_accum
        shared = self.data.shared
        if not shared:
            x, y = x[ch.lo : ch.hi], y[ch.lo : ch.hi]
        rows = x.shape[0] if shared else x.shape[1]
        loss_sum = None
        for a, b in micro_batches(rows, accum):  # the Trainer's split and weights: a packed model trains as solo
            if accum == 1:
                xm, ym = x, y
            elif shared:
                xm, ym = x[a:b], y[a:b]
            else:
                xm, ym = x[:, a:b], y[:, a:b]
            with record_function("stride.forward"), self.precision.autocast():
                loss = micro_loss(self.loss(self.model.forward(ch, xm, shared), ym, ch.lo, ch.hi), a, b, rows, accum)
            with record_function("stride.backward"):
                loss.sum().backward()  # d(sum)/d(loss_i) = 1: each model gets its own gradient, nothing mixes
            loss_sum = loss.detach() if loss_sum is None else loss_sum + loss.detach()
        assert loss_sum is not None
        lo, hi = ch.lo, ch.hi
        with record_function("stride.optimizer"):
            finite = self.optimizer.clip(lo, hi, self.max_norm, loss_sum)
            live = self.alive[lo:hi] & self._host_mask[lo:hi]
            upd = live & finite
            newly = live & ~finite  # diverged at this step: masked from now on, its state as of the last step
            self.diverged_at_t[lo:hi] = torch.where(newly, self.step + 1, self.diverged_at_t[lo:hi])
            self.alive[lo:hi] &= ~newly
            self.optimizer.update(lo, hi, self.step, upd, active)
            self.optimizer.zero_grad(lo, hi)
        return loss_sum

    def _sync_divergence(self) -> None:
        """Read which models diverged since the last read; mark them stopped as of their last finite step."""
        for i, at in enumerate(self.diverged_at_t.tolist()):
            if at and self.stopped[i] is None:
                self.stopped[i], self.diverged_at[i], self.last_step[i] = "diverged", at, at - 1

    # -- validation ------------------------------------------------------------------------------
    def evaluate(self) -> list[float]:
        """Each model's mean validation loss over the first `train.val_batches` batches (as Trainer.evaluate)."""
        total, count = [0.0] * self.n, 0
        self.model.eval()
        with torch.no_grad():
            for x, y in self.data.val_batches(self.cfgs[0].train.val_batches, self.device, self.precision.name):
                shared = self.data.shared
                parts = []
                for ch in self.chunks:
                    xs, ys = (x, y) if shared else (x[ch.lo : ch.hi], y[ch.lo : ch.hi])
                    with self.precision.autocast():
                        parts.append(self.loss(self.model.forward(ch, xs, shared), ys, ch.lo, ch.hi))
                losses = torch.cat(parts).tolist()
                b = x.shape[0] if shared else x.shape[1]
                total = [t + v * b for t, v in zip(total, losses, strict=True)]
                count += b
        self.model.train()
        return [t / max(count, 1) for t in total]

    # -- the loop --------------------------------------------------------------------------------
    def fit(self, until: int | None = None, on_stop: Callable[[int], None] | None = None,
            check: Callable[[], None] | None = None) -> list[ModelRecord]:
        """Train until every model has stopped (or, for tests and exports, until step `until`).

        `on_stop(i)` is called as soon as the host knows model i has stopped (a diverged model: at the next
        log, validation or last step), its summary in `records[i]` (a sweep writes the point's result then,
        not when the whole pack ends). `check` is called after every step (the sweep's stop request: it raises
        to stop, after the step's finished models were reported).
        """
        t0 = self.cfgs[0].train
        metrics = self.cfgs[0].metrics
        reset_peak(self.device)
        self.model.train()
        if self._t_start is None:
            self._t_start = time.perf_counter()
        end = max(c.train.steps for c in self.cfgs)
        while self.step < end and any(self.active()) and (until is None or self.step < until):
            s0 = time.perf_counter()
            x, y = self.data.batch(self.device, self.precision.name)
            active = self.active()
            loss_t = self.train_step(x, y)
            self.step += 1
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.step_times.append(time.perf_counter() - s0)
            lasts = [a and self.step == c.train.steps for a, c in zip(active, self.cfgs, strict=True)]
            val_step = bool(t0.val_every) and self.step % t0.val_every == 0
            if not (self.step % metrics.log_every == 0 or val_step or any(lasts) or self.step in (end, until)):
                if check is not None:
                    check()
                continue  # nothing the host must know at this step: no read of the device
            self._sync_divergence()
            loss = loss_t.tolist()
            now = time.perf_counter() - self._t_start
            val_due = []
            for i in range(self.n):
                if not active[i] or self.stopped[i] == "diverged":
                    continue
                self.last_step[i], self.last_loss[i] = self.step, loss[i]
                if self.step % metrics.log_every == 0 or lasts[i]:
                    self.records[i].history.append({"step": self.step, "loss": loss[i],
                                                    # the rate this step ran at (0-based step - 1), as the
                                                    # trainer logs it
                                                    "lr": self.optimizer.lr(i, self.step - 1), "time_s": now})
                if self.data.streams[self.data.of[i]].val is not None and t0.val_every and (val_step or lasts[i]):
                    val_due.append(i)
                if lasts[i]:
                    self.stopped[i] = "done"
            if val_due:
                self._validate(val_due)
            self._report(on_stop, final=False)
            if check is not None:
                check()
        self._sync_divergence()
        self._report(on_stop, final=True)
        return self.records

    def _validate(self, due: list[int]) -> None:
        v0 = time.perf_counter()
        vals = self.evaluate()
        self.val_time += time.perf_counter() - v0
        now = time.perf_counter() - (self._t_start or 0.0)
        for i in due:
            self.val_loss[i] = vals[i]
            self.records[i].history.append({"step": self.step, "val_loss": vals[i], "time_s": now})
            target = self.cfgs[i].train.target_val_loss
            if target is not None and self.time_to_target[i] is None and vals[i] <= target:
                self.time_to_target[i], self.stopped[i] = now, "target"

    def _report(self, on_stop: Callable[[int], None] | None, final: bool) -> None:
        self.wall = time.perf_counter() - (self._t_start or 0.0)
        for i in range(self.n):
            if (self.stopped[i] is not None or final) and i not in self._reported:
                self.records[i].summary = self.summary(i)
                if self.stopped[i] is not None:
                    self._reported.add(i)
                    if on_stop is not None:
                        on_stop(i)

    def summary(self, i: int) -> dict[str, Any]:
        """Model i's summary: the solo run's keys where they mean the same, plus what the pack adds."""
        c, skip = self.cfgs[i], self.cfgs[0].metrics.skip_steps
        timed = self.step_times[skip:] if len(self.step_times) > skip else self.step_times
        step_s = sum(timed) / len(timed) if timed else None
        mem, mem_kind = peak_memory(self.device)
        b = c.train.batch_size
        return {
            "name": c.train.name,
            "status": self.stopped[i] or "running",
            "steps": self.last_step[i],
            "final_train_loss": self.last_loss[i] if self.stopped[i] != "diverged" else None,
            "final_val_loss": self.val_loss[i],
            "diverged_at_step": self.diverged_at[i],
            "time_to_target_s": self.time_to_target[i],
            "target_val_loss": c.train.target_val_loss,
            "samples_per_s": b / step_s if step_s else None,  # this model's, while packed with the others
            "pack_samples_per_s": self.n * b / step_s if step_s else None,
            "step_time_s": step_s,
            "train_time_s": sum(self.step_times),  # the pack's steps so far (data wait included, validation not)
            "wall_time_s": self.wall,
            "val_time_s": self.val_time,
            "peak_mem_bytes": mem,
            "peak_mem_kind": mem_kind,
            "params": self.model.n_params_each(),
            "params_sha256": params_sha256(self.model.state_dict_of(i)),
            "config_hash": config_hash(c),
            "pack_size": self.n,
            # models a step trained at once: the largest chunk chunk_bounds made (a --chunk 16 pack of 18 runs
            # two chunks of 9, which this recorded as 16)
            "pack_chunk": max(ch.size for ch in self.chunks),
            "pack_index": i,
            "device": str(self.device),
            "precision": c.train.precision,
        }

    # -- one model's state -----------------------------------------------------------------------
    def model_state(self, i: int) -> dict[str, Any]:
        """Model i's parameters, optimizer state, step and data position (what an exported checkpoint holds)."""
        stream = self.data.streams[self.data.of[i]]
        return {"model": self.model.state_dict_of(i), "optim": self.optimizer.state_of(i, self.model.layout),
                "step": self.last_step[i], "data": stream.data_state(self.last_step[i])}

    def close(self) -> None:
        self.data.close()
