"""How many models to pack: the memory model caps it, a short throughput probe picks it.

Memory, per model of a pack: parameters, gradients and optimizer state (AdamW two moments, SGD one
buffer) at the parameters' dtype, plus the activations autograd keeps for backward, measured on one real
batch with `stride.metrics.memory.SavedActivations` (device-independent), plus the batch; times a 1.5
margin for allocator slack and the step's transients. A pack must fit in 70 % of the memory available
now (CUDA: free device memory; CPU: available RAM).

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
        return int(SAFETY * (self.state_bytes + self.activation_bytes + self.batch_bytes))

    @property
    def max_models(self) -> int:
        return max(0, int(USABLE * self.available_bytes) // max(self.per_model, 1))

    def describe(self, n: int) -> str:
        gib, mib = 2**30, 2**20
        return (f"a pack of {n} needs about {n * self.per_model / gib:.2f} GiB ({self.per_model / mib:.1f} MiB a "
                f"model: state {self.state_bytes / mib:.1f}, activations {self.activation_bytes / mib:.1f}, batch "
                f"{self.batch_bytes / mib:.1f}, x{SAFETY} margin); {self.available_bytes / gib:.2f} GiB is "
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


def check_fits(cfg: RunConfig, n: int, mem: MemoryModel | None = None) -> MemoryModel:
    """A ConfigError (one line) when a pack of `n` models of `cfg` does not fit the memory there is."""
    mem = mem or memory_model(cfg)
    if n > mem.max_models:
        fits = mem.max_models
        hint = (f"use --pack {fits} or --pack auto" if fits >= 1
                else "even one model does not fit: lower train.batch_size")
        raise ConfigError(f"--pack {n} does not fit in memory: {mem.describe(n)}; {hint}")
    return mem


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


def probe(cfg: RunConfig, max_n: int, budget_s: float = 60.0, timed_steps: int = 3) -> Probe:
    """Pick a pack size for points like `cfg`, at most `max_n` (the points there are).

    Each pack size is measured right after a lone model, and compared with that one: a busy machine's
    drift then moves both sides of a ratio alike (the lone model's rate reported is the median of them).
    """
    from stride.sweep.packed_train import PackedTrainer

    t0 = time.perf_counter()
    mem = memory_model(cfg)
    cap = min(max_n, mem.max_models)
    steps = 2 + timed_steps
    result = Probe(1, 0.0, memory=mem)
    alone: list[float] = []
    ratios, prev, n = result.ratios, 1, 2
    ratios[1] = 1.0
    while n <= cap and (n == 2 or time.perf_counter() - t0 < budget_s):
        alone.append(solo_rate(cfg, timed_steps))
        try:
            pt = PackedTrainer([_short(cfg, steps, cfg.train.seed + i) for i in range(n)])
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
                      + f" (alone {result.solo_samples_per_s:,.0f} samples/s); memory allows {mem.max_models}; "
                      f"chose {result.size}")
    return result
