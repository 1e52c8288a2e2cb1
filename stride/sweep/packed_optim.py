"""One optimizer step for a pack: per-model gradient clipping, masks, and AdamW / SGD with per-model settings.

Each model's settings and implementation are read from the optimizer `stride train` would build for it
(`stride.optim.factory.build_optimizer` on a probe parameter), so lr, betas, eps, weight decay, momentum
and the foreach / fused choice are the solo run's. The update itself is torch's own functional AdamW / SGD
(`torch.optim.adamw.adamw`, `torch.optim.sgd.sgd`, the code behind `torch.optim.AdamW.step`), called once
per group of models whose settings at this step are equal, on per-model views of the stacked tensors:
the fused CPU/CUDA AdamW kernel runs over the whole group's tensors in one call and computes each model's
update exactly as its solo run's kernel does. A grid over the learning rate gives one group per rate.

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
from stride.train.schedule import lr_factor

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

    def key(self, lr: float) -> tuple:
        return (lr, self.weight_decay, self.betas, self.eps, self.momentum, self.dampening, self.nesterov,
                self.foreach, self.fused)


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
    return ModelOptim(cfg.name, float(d["lr"]), float(d["weight_decay"]), tuple(d.get("betas", (0.0, 0.0))),
                      float(d.get("eps", 0.0)), float(d.get("momentum", 0.0)), float(d.get("dampening", 0.0)),
                      bool(d.get("nesterov", False)), bool(d.get("foreach")), bool(d.get("fused")))


class PackedOptimizer:
    """AdamW or SGD over stacked parameters {name: [N, ...]} with each model's own settings and schedule."""

    def __init__(self, params: dict[str, torch.Tensor], cfgs: list[OptimConfig], total_steps: list[int]) -> None:
        self.settings = [solo_settings(c) for c in cfgs]
        kinds = {s.kind for s in self.settings}
        if len(kinds) != 1:
            raise ConfigError(f"a pack uses one optimizer; got {sorted(kinds)}")
        self.kind = kinds.pop()
        self.cfgs, self.total = cfgs, total_steps
        self.names = list(params)
        self.params = [params[k] for k in self.names]
        self.n = len(cfgs)
        first = self.params[0]
        # per-model, per-parameter step counters as the solo optimizer keeps them (float32 scalars)
        self.steps = torch.zeros(len(self.params), self.n, dtype=torch.float32, device=first.device)
        self.state: dict[str, list[torch.Tensor]] = {}
        if self.kind == "adamw":
            self.state["exp_avg"] = [torch.zeros_like(p) for p in self.params]
            self.state["exp_avg_sq"] = [torch.zeros_like(p) for p in self.params]
        elif any(s.momentum for s in self.settings):
            # torch's SGD starts the buffer as a copy of the first gradient; a zero buffer gives the same
            # first update exactly (0 * momentum + (1 - dampening) * g with dampening 0)
            if any(s.dampening for s in self.settings):
                raise ConfigError("packed SGD supports dampening = 0 (the stride default) only")
            self.state["momentum_buffer"] = [torch.zeros_like(p) for p in self.params]
        self._views = {k: [t.unbind(0) for t in v] for k, v in self.state.items()}
        self._pviews = [p.unbind(0) for p in self.params]
        self._sviews = self.steps.unbind(0)
        self._sviews = [s.unbind(0) for s in self._sviews]

    def lr(self, i: int, step: int) -> float:
        """Model i's learning rate at 0-based step `step`, computed as its solo LambdaLR does."""
        return self.settings[i].lr * lr_factor(step, self.total[i], self.cfgs[i])

    def clip_and_check(self, max_norm: torch.Tensor, loss: torch.Tensor) -> tuple[torch.Tensor, list[bool]]:
        """Clip each model's gradients to its max norm (inf: no clipping); returns (norms [N], finite per model).

        Same arithmetic as `torch.nn.utils.clip_grad_norm_`: the norm of the per-parameter norms, then
        grads x min(1, max_norm / (norm + 1e-6)).
        """
        grads = [p.grad for p in self.params]
        per_param = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads])  # [P, N]
        norm = torch.linalg.vector_norm(per_param, dim=0)
        coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef.view(-1, *([1] * (g.dim() - 1))))
        finite = (torch.isfinite(norm) & torch.isfinite(loss)).tolist()
        return norm, finite

    @torch.no_grad()
    def step(self, step: int, active: list[bool]) -> None:
        """Update the models with active[i] at 0-based step `step`; the others keep params and state."""
        groups: dict[tuple, list[int]] = {}
        for i in range(self.n):
            if active[i]:
                groups.setdefault(self.settings[i].key(self.lr(i, step)), []).append(i)
        gviews = [p.grad.unbind(0) for p in self.params]
        for key, members in groups.items():
            s = self.settings[members[0]]
            lr = key[0]
            pick = [(j, i) for j in range(len(self.params)) for i in members]
            ps = [self._pviews[j][i] for j, i in pick]
            gs = [gviews[j][i] for j, i in pick]
            if self.kind == "adamw":
                adamw_update(
                    ps, gs, [self._views["exp_avg"][j][i] for j, i in pick],
                    [self._views["exp_avg_sq"][j][i] for j, i in pick], [],
                    [self._sviews[j][i] for j, i in pick], foreach=s.foreach, fused=s.fused,
                    amsgrad=False, beta1=s.betas[0], beta2=s.betas[1], lr=lr, weight_decay=s.weight_decay,
                    eps=s.eps, maximize=False,
                )
            else:
                bufs = [self._views["momentum_buffer"][j][i] for j, i in pick] if s.momentum else [None] * len(ps)
                sgd_update(ps, gs, bufs, foreach=s.foreach, fused=s.fused, weight_decay=s.weight_decay,
                                    momentum=s.momentum, lr=lr, dampening=s.dampening, nesterov=s.nesterov,
                                    maximize=False)
                if s.momentum:
                    for j, i in pick:
                        self._sviews[j][i].add_(1)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    # -- one model's state, in torch's optimizer layout (for exporting a checkpoint) ------------------
    def state_of(self, i: int) -> dict[str, dict[str, torch.Tensor]]:
        """Model i's optimizer state per parameter name: {"step", "exp_avg", "exp_avg_sq"} or {"momentum_buffer"}."""
        out: dict[str, dict[str, torch.Tensor]] = {}
        for j, name in enumerate(self.names):
            if self.kind == "adamw":
                out[name] = {"step": self.steps[j, i].clone(), "exp_avg": self.state["exp_avg"][j][i].clone(),
                             "exp_avg_sq": self.state["exp_avg_sq"][j][i].clone()}
            elif "momentum_buffer" in self.state and self.steps[j, i] > 0:
                out[name] = {"momentum_buffer": self.state["momentum_buffer"][j][i].clone()}
        return out


def max_norms(clips: list[float | None], device: torch.device) -> torch.Tensor:
    """Per-model clipping thresholds; None (no clipping) becomes inf, which never scales a gradient."""
    return torch.tensor([math.inf if c is None else c for c in clips], dtype=torch.float32, device=device)
