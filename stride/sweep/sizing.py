"""How many models to pack: the memory model caps it, a short throughput probe picks it.

Memory: every model of a pack keeps its parameters, gradients and optimizer state (AdamW two moments,
SGD one buffer) at the parameters' dtype for the whole run; a step trains the pack chunk by chunk
(stride.sweep.packed_model), so only one chunk's activations (what autograd keeps for backward, measured
on one real batch with `stride.metrics.memory.SavedActivations`, device-independent) and batches are held
at once. A pack of N in chunks of C needs 1.5 x (N x state + C x (activations + batch)), the 1.5 a margin
for allocator slack and the step's transients, and must fit in 70 % of the memory available now (CUDA:
free device memory; CPU: available RAM). A pack whose default chunk does not fit trains in smaller chunks
that do (`check_fits`); one whose state alone does not fit is refused in one line.

Throughput: the pack's model-samples/s (models x batch / step time) for N = 2, 4, 8, ... against one
model trained alone by the ordinary Trainer, measured just before each pack. Doubling stops when the
ratio gains less than 10 %: that N is where the samples/s per model stops rising. If no pack beats the
lone model by 5 %, the size is 1 and the points run one by one, so packing is never slower than not
packing by more than the probe's noise.

The lone model's rate that the sweep's speed-up is reckoned against (`measure_solo`) is a measurement that
holds: a throwaway run first (a fresh process's first Trainer ran 1-5x slower than later ones, well past its
own 2 warm-up steps: 3 timed steps, about 8 ms, read 5.7k-27k samples/s where 60-step runs read 19k-31k),
then a fresh Trainer whose steps after its 2 warm-up ones are timed in 3 windows of at least
`SOLO_MIN_WINDOW_STEPS` steps and `SOLO_MIN_WINDOW_S` seconds each (capped at `SOLO_MAX_S` in all), and the
median window is the rate. Each window is samples over the sum of its step walls, as a pack's rate is.
The cap holds by wall time too: the window length comes from the throwaway run's fastest step, and a host that
slows down after it stretched the "at most 5 s" to 31-34 s (audit 7, #11); the timed run now stops before a
step that would pass `SOLO_MAX_S` of wall time since its timing began, and the steps it ran are split into 3
equal windows (shorter ones; the figure printed says how many steps and seconds were timed, and that the cap
cut them).
"""

from __future__ import annotations

import copy
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from stride.config import RunConfig
from stride.config.errors import ConfigError
from stride.data.build import build_data
from stride.files import host
from stride.metrics.contention import CONTENDED_THREADS, WaitClock, foreign_wait
from stride.metrics.memory import SavedActivations
from stride.models.losses import make_loss
from stride.models.registry import build_model
from stride.train import resources
from stride.train.callbacks import Callback
from stride.train.device import resolve_device, seed_everything

if TYPE_CHECKING:
    from stride.train.callbacks import TrainerView

SAFETY = 1.5
USABLE = 0.7
GAIN = 1.10  # a doubling must add this much throughput to be worth it
BEAT_SOLO = 1.05
# the lone model's rate for the speed-up figure (measure_solo)
SOLO_WARMUP_STEPS = 8  # the throwaway run's steps (warms the process; its steps give the step time)
SOLO_SKIP = 2  # the timed run's own first steps, not timed (a fresh Trainer's start)
SOLO_WINDOWS = 3  # windows of timed steps; the rate is their median
SOLO_MIN_WINDOW_STEPS = 10
SOLO_MIN_WINDOW_S = 0.1  # so at least 0.3 s is timed in all
SOLO_MAX_S = 5.0  # timed seconds in all at most (a slow model: fewer steps, at least one a window)
SOLO_MARGIN = 1.25  # windows sized for this much more than SOLO_MIN_WINDOW_S: warm steps come out faster


@dataclass
class MemoryModel:
    state_bytes: int  # parameters + gradients + optimizer state of one model
    activation_bytes: int  # what autograd keeps for one model's backward at the batch size
    batch_bytes: int
    available_bytes: int

    @property
    def per_model(self) -> int:
        """One model trained alone (a pack of one, one chunk)."""
        return self.need(1, 1)

    @property
    def usable(self) -> int:
        return int(USABLE * self.available_bytes)

    def need(self, n: int, chunk: int) -> int:
        """Bytes for a pack of n models trained `chunk` at a time: every model's state, one chunk's activations."""
        return int(SAFETY * (n * self.state_bytes + min(chunk, n) * (self.activation_bytes + self.batch_bytes)))

    def max_chunk(self, n: int) -> int:
        """The largest chunk a pack of n fits in (0: the pack's state alone does not fit)."""
        spare = self.usable / SAFETY - n * self.state_bytes
        if spare < self.activation_bytes + self.batch_bytes:
            return 0
        return min(n, int(spare // max(self.activation_bytes + self.batch_bytes, 1)))

    def max_models(self, chunk: int | None = None) -> int:
        """The largest pack that fits when trained `chunk` models at a time (None: the whole pack at once)."""
        room, act = self.usable / SAFETY, self.activation_bytes + self.batch_bytes
        whole = max(0, int(room // max(self.state_bytes + act, 1)))  # n x (state + act) <= room
        if chunk is None or whole < chunk:  # packs no larger than a chunk: their activations are all kept
            return whole
        return int((room - chunk * act) // max(self.state_bytes, 1))  # n x state + chunk x act <= room

    def describe(self, n: int, chunk: int) -> str:
        gib, mib = 2**30, 2**20
        c = min(chunk, n)
        return (f"a pack of {n} in chunks of {c} needs about {self.need(n, c) / gib:.2f} GiB ({n} x state "
                f"{self.state_bytes / mib:.1f} MiB + {c} x (activations {self.activation_bytes / mib:.1f} MiB + batch "
                f"{self.batch_bytes / mib:.1f} MiB), x{SAFETY} margin); {self.available_bytes / gib:.2f} GiB is "
                f"available and a pack may use {int(USABLE * 100)} % of it")


def available_bytes(device: torch.device) -> int:
    """Free bytes where the pack's models live: the CUDA device's, else the host's (as `stride train` reads them)."""
    if device.type == "cuda":
        return resources.device_available(device)
    return host.available_memory_bytes()


def memory_model(cfg: RunConfig) -> MemoryModel:
    """Measure one model of `cfg` (built as `stride train` builds it) on one real batch."""
    device = resolve_device(cfg.train.device)
    data = build_data(cfg.data, cfg.train.batch_size, validation=cfg.train.validates)
    seed_everything(cfg.train.seed)
    model = build_model(cfg.model, data.n_features, data.seq_len, data.n_horizons).to(device)
    x, y = next(iter(data.train))
    x, y = x.to(device), y.to(device)
    n_state = 2 if cfg.optim.name.startswith("adam") else (1 if cfg.optim.momentum else 0)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    loss_fn = make_loss(cfg.model.loss, huber_delta=cfg.model.huber_delta, quantiles=cfg.model.quantiles)
    with SavedActivations(model) as saved:  # activations only: the weights are counted in params above
        loss = loss_fn(model(x), y)
    del loss
    return MemoryModel(params * (2 + n_state), saved.bytes, x.numel() * x.element_size() + y.numel() * y.element_size(),
                       available_bytes(device))


def check_fits(cfg: RunConfig, n: int, mem: MemoryModel | None = None, chunk: int | None = None
               ) -> tuple[MemoryModel, int]:
    """The chunk a pack of `n` models of `cfg` trains in, checked against the memory there is.

    `chunk` None: the device's default (stride.sweep.packed_model.default_chunk), lowered to the largest
    chunk that fits when it does not. A given `chunk` that does not fit, or a pack whose state alone does
    not fit, is a ConfigError of one line naming the figures and what would fit.
    """
    from stride.sweep.packed_model import default_chunk

    mem = mem or memory_model(cfg)
    want = min(chunk or default_chunk(n, resolve_device(cfg.train.device)), n)
    if mem.need(n, want) <= mem.usable:
        return mem, want
    fits = mem.max_chunk(n)
    if fits >= 1 and chunk is None:
        return mem, fits  # split into chunks that fit
    if fits >= 1:
        raise ConfigError(f"--pack {n} --chunk {chunk} does not fit in memory: {mem.describe(n, want)}; "
                          f"use --chunk {fits} or --chunk auto")
    most = mem.max_models(1)
    hint = (f"use --pack {most} or --pack auto" if most >= 1
            else "even one model does not fit: lower train.batch_size")
    raise ConfigError(f"--pack {n} does not fit in memory even one model at a time: {mem.describe(n, 1)}; {hint}")


@dataclass
class Probe:
    size: int
    solo_samples_per_s: float
    packed: dict[int, float] = field(default_factory=dict)  # N -> model-samples/s of a pack of N
    ratios: dict[int, float] = field(default_factory=dict)  # N -> that over the lone model measured just before
    seconds: float = 0.0
    memory: MemoryModel | None = None
    why: str = ""
    solo: SoloRate | None = None  # the lone model's rate that the sweep's speed-up is reckoned against


def _short(cfg: RunConfig, steps: int, seed: int) -> RunConfig:
    c = copy.deepcopy(cfg)
    c.train.steps, c.train.val_every, c.train.seed, c.train.target_val_loss = steps, 0, seed, None
    c.metrics.skip_steps, c.metrics.flops, c.metrics.progress = 2, False, False
    c.checkpoint.enabled, c.metrics.tensorboard, c.metrics.prometheus = False, False, False
    c.metrics.mlflow, c.metrics.wandb = False, False  # a timing run is no tracker's run
    return c


def solo_rate(cfg: RunConfig, timed_steps: int = 3) -> float:
    """Samples/s of one model of `cfg` trained alone by the ordinary Trainer, over a few steps after 2 warm-up ones.

    Brief (milliseconds for a small model): the probe's side-by-side comparisons only, in a process that
    `measure_solo` has warmed; the speed-up figure uses `measure_solo`."""
    from stride.train.trainer import Trainer

    return Trainer(config=_short(cfg, 2 + timed_steps, cfg.train.seed), write_run_dir=False).fit().summary[
        "samples_per_s"] or 0.0


@dataclass
class SoloRate:
    """One model of a class trained alone by the ordinary Trainer (`measure_solo`): the rate and how it was taken."""

    samples_per_s: float  # the median window's
    windows: list[float]  # samples/s of each window of timed steps
    window_steps: int  # steps a window
    timed_s: float  # seconds of the timed steps, all windows
    warmup_steps: int  # steps run untimed first: the throwaway run's and the timed run's own first ones
    capped: bool = False  # the wall-time cap (SOLO_MAX_S) stopped the timed run before its planned steps
    waiting_threads: float | None = None  # threads waiting for cores during the timed run (metrics.contention)
    # cores' worth other processes used on this process's cores meanwhile: the wait counts up to this (None: all)
    other_processes_cores: float | None = None

    def unreliable(self) -> str | None:
        """Why the rate cannot carry a speed-up figure, or None: cut short by the cap (steps slower than the warm-up
        run's), windows apart by more than a third, or threads starved of cores (audit 21, M1: two one-step windows
        of a contended host made a 35x "speed-up")."""
        why = []
        if self.capped:  # its steps ran slower than planned; a slow model's short windows alone are by design
            why.append(f"cut at the {SOLO_MAX_S:g} s cap ({len(self.windows)} windows of {self.window_steps} "
                       f"step{'s' if self.window_steps != 1 else ''})")
        if len(self.windows) > 1 and min(self.windows) > 0 and max(self.windows) / min(self.windows) > 4 / 3:
            why.append(f"windows {min(self.windows):,.0f}-{max(self.windows):,.0f} samples/s apart")
        foreign = foreign_wait(self.waiting_threads, self.other_processes_cores)  # not its own threads' waits
        if foreign is not None and foreign >= CONTENDED_THREADS:
            why.append(f"{foreign:.2f} threads waiting for cores other processes held")
        return "; ".join(why) or None

    def describe(self) -> str:
        lo, hi = min(self.windows, default=0.0), max(self.windows, default=0.0)
        cap = f", cut at the {SOLO_MAX_S:g} s cap (steps ran slower than the warm-up run's)" if self.capped else ""
        return (f"{self.samples_per_s:,.0f} samples/s alone (the Trainer): median of {len(self.windows)} windows of "
                f"{self.window_steps} steps, {self.timed_s:.2f} s timed{cap} ({lo:,.0f}-{hi:,.0f} samples/s), after "
                f"{self.warmup_steps} untimed warm-up steps")

    def as_dict(self) -> dict[str, Any]:
        return {"samples_per_s": self.samples_per_s, "windows": self.windows, "window_steps": self.window_steps,
                "timed_s": self.timed_s, "warmup_steps": self.warmup_steps, "capped": self.capped,
                "waiting_threads": self.waiting_threads, "other_processes_cores": self.other_processes_cores,
                "unreliable": self.unreliable(), "method": self.describe()}


def _window_steps(step_s: float) -> int:
    """Steps a window: at least SOLO_MIN_WINDOW_STEPS and SOLO_MIN_WINDOW_S, all windows within SOLO_MAX_S."""
    step_s = max(step_s, 1e-9)
    want = max(SOLO_MIN_WINDOW_STEPS, math.ceil(SOLO_MARGIN * SOLO_MIN_WINDOW_S / step_s))
    return max(1, min(want, int(SOLO_MAX_S / SOLO_WINDOWS / step_s)))


_clock = time.perf_counter  # the wall clock of the cap (a test replaces it)


class _CapReached(Exception):
    """The timed run reached SOLO_MAX_S of wall time: it stops here (raised from a callback, caught below)."""


class _WallCap(Callback):
    """Stops the run (`_CapReached`) before a step that would end past `limit_s` seconds of wall time since step
    `skip` ended, the next step reckoned as long as the last one."""

    def __init__(self, skip: int, limit_s: float) -> None:
        self.skip, self.limit_s = skip, limit_s
        self.t0: float | None = None
        self.last: float | None = None

    def on_step_end(self, trainer: TrainerView) -> None:
        now = _clock()
        if trainer.step <= self.skip or self.t0 is None or self.last is None:
            self.t0 = self.last = now
            return
        step_s, self.last = now - self.last, now
        if now - self.t0 + step_s > self.limit_s:
            raise _CapReached


def _run_alone(cfg: RunConfig, steps: int, skip: int, limit_s: float | None = None) -> tuple[list[float], bool]:
    """Every step's wall time of one model of `cfg` trained alone for `steps` steps by the ordinary Trainer, and
    whether `limit_s` (wall seconds after the first `skip` steps; None: no limit) stopped it short."""
    from stride.train.trainer import Trainer

    c = _short(cfg, steps, cfg.train.seed)
    c.metrics.skip_steps = skip
    trainer = Trainer(config=c, write_run_dir=False,
                      callbacks=[_WallCap(skip, limit_s)] if limit_s is not None else None)
    try:
        trainer.fit()
    except _CapReached:
        return list(trainer.timer.step_seconds), True
    return list(trainer.timer.step_seconds), False


def _on_cpu(cfg: RunConfig) -> bool:
    """The Trainer of `cfg` runs on the CPU (the device it resolves `train.device` to)."""
    from stride.train.device import resolve_device

    return resolve_device(cfg.train.device).type == "cpu"


def measure_solo(cfg: RunConfig) -> SoloRate:
    """Samples/s of one model of `cfg` trained alone by the ordinary Trainer, measured to hold (module docstring).

    A throwaway run of SOLO_WARMUP_STEPS steps warms the process (its fastest step sets the window length);
    then a fresh Trainer runs SOLO_SKIP untimed steps and SOLO_WINDOWS windows of timed ones, stopped by the
    wall-time cap (SOLO_MAX_S) if its steps run slower than planned: its timed steps are then split into
    SOLO_WINDOWS equal shorter windows. A window's rate is its samples over the sum of its step walls (data
    wait in, as a pack's step times have it); the median window is the rate; `timed_s` is the seconds of the
    windows' steps."""
    from stride.train.divergence import TrainingDiverged

    try:  # a class whose first point diverges (the grid's largest lr) has no rate: its points get no estimate
        warm, _ = _run_alone(cfg, SOLO_WARMUP_STEPS, SOLO_SKIP)
        n = _window_steps(min(warm[SOLO_SKIP:] or warm))  # its fastest step: a cold start's slow ones cut none short
        clock = WaitClock.started()
        times, capped = _run_alone(cfg, SOLO_SKIP + SOLO_WINDOWS * n, SOLO_SKIP, SOLO_MAX_S)
        # the host's threads matter where they run the model: on a GPU they only launch kernels (review L5), and
        # the run summaries say contention on CPU runs only
        waiting, other = clock.read() if _on_cpu(cfg) else (None, None)
        times = times[SOLO_SKIP:]
    except TrainingDiverged:
        return SoloRate(0.0, [], 0, 0.0, 0)
    if capped:  # fewer steps than planned: equal windows of what ran (at least one step each, where there are 3)
        n = max(1, len(times) // SOLO_WINDOWS)
    used = [times[k * n : (k + 1) * n] for k in range(SOLO_WINDOWS) if len(times) >= (k + 1) * n]  # whole only
    windows = [n * cfg.train.batch_size / sum(w) for w in used if sum(w) > 0]
    return SoloRate(statistics.median(windows) if windows else 0.0, windows, n, sum(map(sum, used)),
                    len(warm) + SOLO_SKIP, capped, waiting, other)


def probe(cfg: RunConfig, max_n: int, budget_s: float = 60.0, timed_steps: int = 3, chunk: int | None = None,
          check: Callable[[], None] | None = None) -> Probe:
    """Pick a pack size for points like `cfg`, at most `max_n` (the points there are).

    Each pack size is measured right after a lone model, and compared with that one: a busy machine's
    drift then moves both sides of a ratio alike. The lone model's rate reported (and used for the sweep's
    speed-up) is `measure_solo`'s, taken first: it also warms the process, so the first comparison is not
    against a cold Trainer. `check` (the sweep's stop request) is called after each measurement: it raises to stop.
    """
    from stride.sweep.packed_train import PackedTrainer

    t0 = time.perf_counter()
    mem = memory_model(cfg)
    solo = measure_solo(cfg)
    fit = mem.max_models(chunk or 1)  # packs up to this size fit (in small enough chunks)
    cap = min(max_n, fit)
    steps = 2 + timed_steps
    result = Probe(1, solo.samples_per_s, memory=mem, solo=solo)
    alone: list[float] = []
    ratios, prev, n = result.ratios, 1, 2
    ratios[1] = 1.0
    while n <= cap and (n == 2 or time.perf_counter() - t0 < budget_s):
        if check is not None:
            check()
        alone.append(solo_rate(cfg, timed_steps))
        fits = check_fits(cfg, n, mem, chunk)[1]  # n <= cap: a chunk that fits exists
        try:
            pt = PackedTrainer([_short(cfg, steps, cfg.train.seed + i) for i in range(n)], chunk=fits)
        except ConfigError as exc:  # found only when the models are built (a model with its own loss)
            result.why = f"not packed: {exc}"
            break
        pt.fit()
        pt.close()
        times = pt.step_times[2:]
        result.packed[n] = n * cfg.train.batch_size * len(times) / sum(times)
        ratios[n] = result.packed[n] / alone[-1]
        if ratios[n] < ratios[prev] * GAIN:
            break  # the throughput stopped rising
        prev, n = n, n * 2
    best = max(ratios, key=ratios.__getitem__)
    result.size = best if ratios[best] >= BEAT_SOLO else 1
    result.seconds = time.perf_counter() - t0
    if not result.why:
        side = f"alone {statistics.median(alone):,.0f} samples/s over {timed_steps} steps" if alone else "alone"
        result.why = ("probe: packed/alone " + ", ".join(f"N={k}: {ratios[k]:.2f}x" for k in result.packed)
                      + f" ({side}); memory allows up to {fit:,} models; chose {result.size}")
    return result
