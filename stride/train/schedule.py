"""Learning-rate schedule: linear warmup, then cosine decay to min_lr_ratio (or constant)."""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR

from stride.config.schema import OptimConfig


def lr_factor(step: int, total: int, cfg: OptimConfig) -> float:
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    span = max(total - cfg.warmup_steps, 1)
    progress = min(max(step - cfg.warmup_steps, 0) / span, 1.0)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_scheduler(optimizer: torch.optim.Optimizer, total_steps: int, cfg: OptimConfig) -> LambdaLR:
    return LambdaLR(optimizer, lambda s: lr_factor(s, total_steps, cfg))


def sync_lr(scheduler: LambdaLR) -> None:
    """Set the optimizer's learning rate to what this schedule gives at its loaded step.

    A checkpoint restores the lr its run's schedule set; a run extended to more steps (stride.checkpoint.rerun)
    follows its new, longer schedule from the next step on. The same arithmetic as LambdaLR.step, so an
    ordinary resume sets the very value it loaded."""
    step = scheduler.last_epoch
    values = [base * fn(step) for fn, base in zip(scheduler.lr_lambdas, scheduler.base_lrs, strict=True)]
    for group, lr in zip(scheduler.optimizer.param_groups, values, strict=True):
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr
    scheduler._last_lr = [g["lr"].clone() if isinstance(g["lr"], torch.Tensor) else g["lr"]  # get_last_lr()
                          for g in scheduler.optimizer.param_groups]


def trained_lr(scheduler: LambdaLR) -> float:
    """The learning rate the last optimizer step ran at (group 0): the schedule at the step before its
    `last_epoch`. The optimizer's own `lr` already holds the next step's, which metrics.jsonl logged as the
    step's own before (audit 6: step 1 of a 20-step warm-up logged 1e-4; it trained at 5e-5)."""
    step = max(scheduler.last_epoch - 1, 0)
    return float(scheduler.base_lrs[0]) * scheduler.lr_lambdas[0](step)
