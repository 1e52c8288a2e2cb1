"""One optimizer step for a pack: per-model gradient clipping, masks, and AdamW / SGD with per-model settings.

The pack's parameters, gradients and optimizer state are flat [N, P] buffers (stride.sweep.packed_model:
each model's parameters side by side in one row), so every per-model operation is one operation on a row
or on a block of rows (a chunk of models). Each model's settings and implementation are read from the
optimizer `stride train` would build for it (`stride.optim.factory.build_optimizer` on a probe parameter):
lr, betas, eps, weight decay, momentum, and the foreach / fused choice.

The update: torch's own functional AdamW / SGD (`torch.optim.adamw.adamw`, `torch.optim.sgd.sgd`, the code
behind `torch.optim.AdamW.step`) once per model on its row, with that model's settings: the fused kernel
computes each model's update exactly as its solo run's kernel does, in one pass over the row. A model that
is masked (diverged at this step) gets the fused kernel's `found_inf` flag, read on the device, so the step
needs no host read; the foreach and for-loop implementations have no such flag and read the chunk's mask on
the host once a step. (One stacked update of all the rows in one pass, compiled, was tried and dropped: on
this project's 2-core AMD EPYC host the whole optimizer phase, clipping and masks included, is 6 % of a
packed `mlp_tiny` step at N = 16 and less for the larger models, so it could not pay for a compilation.)

Supported: `adamw` and `sgd`. Others (`adamw8bit`, `adafactor`, `adamw_triton`) keep per-parameter state
in their own layouts and are refused with a clear message (train such points with `--pack 1`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.optim.adamw import adamw as adamw_update
from torch.optim.sgd import sgd as sgd_update

from stride.config.errors import ConfigError
from stride.config.schema import OptimConfig
from stride.optim.factory import build_optimizer
from stride.sweep.model_lanes import per_model
from stride.train.schedule import lr_factor

Layout = dict[str, tuple[int, int, tuple[int, ...]]]  # parameter name -> (offset, numel, shape) in a row
SUPPORTED = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}


@dataclass(frozen=True)
class ModelOptim:
    """One model's optimizer settings, as its solo run's torch optimizer holds them."""

    kind: str
    lr: float
    weight_decay: float
    betas: tuple[float, float]
    eps: float
    momentum: float
    dampening: float
    nesterov: bool
    foreach: bool
    fused: bool


def check_supported(cfg: OptimConfig) -> None:
    if cfg.name not in SUPPORTED:
        raise ConfigError(f"`optim.name` = {cfg.name!r}: packed training supports {', '.join(SUPPORTED)}; "
                          "train these points one by one (stride sweep --pack 1)")


def solo_settings(cfg: OptimConfig) -> ModelOptim:
    """The settings `stride train` uses for `cfg`, or a ConfigError naming what packing does not support."""
    check_supported(cfg)
    opt = build_optimizer([torch.zeros(1, requires_grad=True)], cfg)
    if type(opt) is not SUPPORTED[cfg.name]:
        raise ConfigError(f"`optim.name` = {cfg.name!r} built a {type(opt).__name__}, not the torch optimizer "
                          "packed training reproduces")
    d = opt.defaults
    if d.get("amsgrad") or d.get("maximize") or d.get("differentiable") or d.get("capturable"):
        raise ConfigError(f"`optim.name` = {cfg.name!r} with amsgrad/maximize/capturable is not packed")
    if d.get("dampening"):
        raise ConfigError("packed SGD supports dampening = 0 (the stride default) only")
    return ModelOptim(cfg.name, float(d["lr"]), float(d["weight_decay"]), tuple(d.get("betas", (0.0, 0.0))),
                      float(d.get("eps", 0.0)), float(d.get("momentum", 0.0)), float(d.get("dampening", 0.0)),
                      bool(d.get("nesterov", False)), bool(d.get("foreach")), bool(d.get("fused")))


class PackedOptimizer:
    """AdamW or SGD over the flat parameters `flat` [N, P] and gradients `grad` [N, P] of a pack."""

    def __init__(self, flat: torch.Tensor, grad: torch.Tensor, cfgs: list[OptimConfig], total_steps: list[int]) -> None:
        self.settings = [solo_settings(c) for c in cfgs]
        kinds = {s.kind for s in self.settings}
        if len(kinds) != 1:
            raise ConfigError(f"a pack uses one optimizer; got {sorted(kinds)}")
        self.kind = kinds.pop()
        self.cfgs, self.total, self.n = cfgs, total_steps, len(cfgs)
        self.flat, self.grad = flat, grad
        dev = flat.device
        # per-model step counts as the solo optimizer keeps them (float32; one per model, its parameters share it)
        self.steps = torch.zeros(self.n, dtype=torch.float32, device=dev)
        self.state: dict[str, torch.Tensor] = {}
        if self.kind == "adamw":
            self.state = {"exp_avg": torch.zeros_like(flat), "exp_avg_sq": torch.zeros_like(flat)}
        elif any(s.momentum for s in self.settings):
            # torch's SGD starts the buffer as a copy of the first gradient; a zero buffer gives the same first
            # update exactly (0 * momentum + g with dampening 0)
            self.state = {"momentum_buffer": torch.zeros_like(flat)}

        # models whose lr schedule is the same function of the step share one lr_factor call a step
        self._schedule_of = [_schedule_key(c, t) for c, t in zip(cfgs, total_steps, strict=True)]
        self._lrs: tuple[int, list[float]] = (-1, [])

    def lr(self, i: int, step: int) -> float:
        """Model i's learning rate at 0-based step `step`, computed as its solo LambdaLR does."""
        return self.settings[i].lr * lr_factor(step, self.total[i], self.cfgs[i])

    def lrs(self, step: int) -> list[float]:
        """Every model's lr at `step` (computed once a step, shared by the chunks)."""
        if self._lrs[0] == step:
            return self._lrs[1]
        factors: dict[tuple, float] = {}
        out = []
        for i, key in enumerate(self._schedule_of):
            if key not in factors:
                factors[key] = lr_factor(step, self.total[i], self.cfgs[i])
            out.append(self.settings[i].lr * factors[key])
        self._lrs = (step, out)
        return out

    def clip(self, lo: int, hi: int, max_norm: torch.Tensor, loss: torch.Tensor) -> torch.Tensor:
        """Clip models lo..hi-1 to their max norms (inf: no clipping); returns which are finite [c] (on device).

        As `torch.nn.utils.clip_grad_norm_`: the model's gradient norm, then grads x min(1, max_norm / (norm +
        1e-6)); the norm is over the model's row (the same number as the norm of its per-parameter norms).
        """
        g = self.grad[lo:hi]
        norm = torch.linalg.vector_norm(g, dim=1)
        coef = torch.clamp(max_norm[lo:hi] / (norm + 1e-6), max=1.0)
        g.mul_(coef.to(g.dtype).unsqueeze(1))
        return torch.isfinite(norm) & torch.isfinite(loss)

    @torch.no_grad()
    def update(self, lo: int, hi: int, step: int, upd: torch.Tensor, host_active: list[bool]) -> None:
        """Update models lo..hi-1 where `upd` [c] (device) is True, at 0-based step `step`.

        `host_active` (what the host knows: not stopped) limits the per-model calls.
        """
        lrs = self.lrs(step)
        if self.kind == "adamw" and all(s.fused for s in self.settings):
            skip = (~upd).to(torch.float32)  # the fused kernel's found_inf: 1 skips that model's update
            rows = [i for i in range(lo, hi) if host_active[i]]

            def one(k: int) -> None:  # rows are independent: on a CPU, side by side on single-threaded lanes
                with torch.no_grad():
                    self._adamw_one(rows[k], lrs[rows[k]], found_inf=skip[rows[k] - lo])

            per_model(one, len(rows), self.flat.device)
        else:
            self._eager_unfused(lo, hi, lrs, upd.tolist(), host_active)

    def _adamw_one(self, i: int, lr: float, found_inf: torch.Tensor | None = None) -> None:
        s = self.settings[i]
        adamw_update([self.flat[i]], [self.grad[i]], [self.state["exp_avg"][i]], [self.state["exp_avg_sq"][i]], [],
                     [self.steps[i]], foreach=s.foreach, fused=s.fused, found_inf=found_inf, amsgrad=False,
                     beta1=s.betas[0], beta2=s.betas[1], lr=lr, weight_decay=s.weight_decay, eps=s.eps,
                     maximize=False)

    def _eager_unfused(self, lo: int, hi: int, lrs: list[float], upd: list[bool], host_active: list[bool]) -> None:
        for j, i in enumerate(range(lo, hi)):
            if not (upd[j] and host_active[i]):
                continue
            if self.kind == "adamw":
                self._adamw_one(i, lrs[i])
                continue
            s, buf = self.settings[i], self.state.get("momentum_buffer")
            sgd_update([self.flat[i]], [self.grad[i]], [buf[i] if s.momentum else None], foreach=s.foreach,
                       fused=s.fused, weight_decay=s.weight_decay, momentum=s.momentum, lr=lrs[i],
                       dampening=s.dampening, nesterov=s.nesterov, maximize=False)
            self.steps[i].add_(1)

    def zero_grad(self, lo: int, hi: int) -> None:
        self.grad[lo:hi].zero_()

    # -- one model's state, in torch's optimizer layout (for exporting a checkpoint) ------------------
    def state_of(self, i: int, layout: Layout) -> dict[str, dict[str, torch.Tensor]]:
        """Model i's optimizer state per parameter name: {"step", "exp_avg", "exp_avg_sq"} or {"momentum_buffer"}."""
        def piece(t: torch.Tensor, name: str) -> torch.Tensor:
            off, numel, shape = layout[name]
            return t[i, off : off + numel].view(shape).clone()

        out: dict[str, dict[str, torch.Tensor]] = {}
        for name in layout:
            if self.kind == "adamw":
                out[name] = {"step": self.steps[i].clone(), "exp_avg": piece(self.state["exp_avg"], name),
                             "exp_avg_sq": piece(self.state["exp_avg_sq"], name)}
            elif self.settings[i].momentum and self.steps[i] > 0:
                out[name] = {"momentum_buffer": piece(self.state["momentum_buffer"], name)}
        return out


def _schedule_key(cfg: OptimConfig, total: int) -> tuple:
    return (cfg.warmup_steps, cfg.schedule, cfg.min_lr_ratio, total)


def max_norms(clips: list[float | None], device: torch.device) -> torch.Tensor:
    """Per-model clipping thresholds; None (no clipping) becomes inf, which never scales a gradient."""
    return torch.tensor([math.inf if c is None else c for c in clips], dtype=torch.float64, device=device)
