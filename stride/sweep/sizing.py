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
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass, field

import psutil
import torch

from stride.config import RunConfig
from stride.config.errors import ConfigError
from stride.data.build import build_data
from stride.metrics.memory import SavedActivations
from stride.models.losses import make_loss
from stride.models.registry import build_model
from stride.train.device import resolve_device, seed_everything

SAFETY = 1.5
USABLE = 0.7
GAIN = 1.10  # a doubling must add this much throughput to be worth it
BEAT_SOLO = 1.05


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
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return int(psutil.virtual_memory().available)


def memory_model(cfg: RunConfig) -> MemoryModel:
    """Measure one model of `cfg` (built as `stride train` builds it) on one real batch."""
    device = resolve_device(cfg.train.device)
    data = build_data(cfg.data, cfg.train.batch_size)
    seed_everything(cfg.train.seed)
    model = build_model(cfg.model, data.n_features, data.seq_len, data.n_horizons).to(device)
    x, y = next(iter(data.train))
    x, y = x.to(device), y.to(device)
    n_state = 2 if cfg.optim.name.startswith("adam") else (1 if cfg.optim.momentum else 0)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    loss_fn = make_loss(cfg.model.loss, huber_delta=cfg.model.huber_delta, quantiles=cfg.model.quantiles)
    with SavedActivations() as saved:
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


def _short(cfg: RunConfig, steps: int, seed: int) -> RunConfig:
    c = copy.deepcopy(cfg)
    c.train.steps, c.train.val_every, c.train.seed, c.train.target_val_loss = steps, 0, seed, None
    c.metrics.skip_steps, c.metrics.flops, c.metrics.progress = 2, False, False
    c.checkpoint.enabled, c.metrics.tensorboard, c.metrics.prometheus = False, False, False
    return c


def solo_rate(cfg: RunConfig, timed_steps: int = 3) -> float:
    """Samples/s of one model of `cfg` trained alone by the ordinary Trainer, over a few steps after 2 warm-up ones."""
    from stride.train.trainer import Trainer

    return Trainer(config=_short(cfg, 2 + timed_steps, cfg.train.seed), write_run_dir=False).fit().summary[
        "samples_per_s"] or 0.0


def probe(cfg: RunConfig, max_n: int, budget_s: float = 60.0, timed_steps: int = 3, chunk: int | None = None
          ) -> Probe:
    """Pick a pack size for points like `cfg`, at most `max_n` (the points there are).

    Each pack size is measured right after a lone model, and compared with that one: a busy machine's
    drift then moves both sides of a ratio alike (the lone model's rate reported is the median of them).
    """
    from stride.sweep.packed_train import PackedTrainer

    t0 = time.perf_counter()
    mem = memory_model(cfg)
    fit = mem.max_models(chunk or 1)  # packs up to this size fit (in small enough chunks)
    cap = min(max_n, fit)
    steps = 2 + timed_steps
    result = Probe(1, 0.0, memory=mem)
    alone: list[float] = []
    ratios, prev, n = result.ratios, 1, 2
    ratios[1] = 1.0
    while n <= cap and (n == 2 or time.perf_counter() - t0 < budget_s):
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
    result.solo_samples_per_s = statistics.median(alone) if alone else solo_rate(cfg, timed_steps)
    result.seconds = time.perf_counter() - t0
    if not result.why:
        result.why = ("probe: packed/alone " + ", ".join(f"N={k}: {ratios[k]:.2f}x" for k in result.packed)
                      + f" (alone {result.solo_samples_per_s:,.0f} samples/s); memory allows up to {fit:,} models; "
                      f"chose {result.size}")
    return result
