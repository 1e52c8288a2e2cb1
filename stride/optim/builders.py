"""Builders for stride's own optimizers, in the `(params, OptimConfig, lr) -> Optimizer` form that
`stride.optim.factory.OPTIMIZERS` uses, so the factory can register them with one `update`.

`optim.eps` is Adam's denominator epsilon. Adafactor's epsilon plays a different role (it regularises
g^2, 1e-30 in the paper), so Adafactor keeps its own default instead of taking `optim.eps`.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from stride.config.schema import OptimConfig
from stride.optim.adafactor import Adafactor
from stride.optim.adamw8bit import AdamW8bit
from stride.optim.adamw_fused_triton import FusedAdamW


def fused_adamw(params: Iterable[torch.nn.Parameter], cfg: OptimConfig, lr: float | torch.Tensor) -> FusedAdamW:
    impl = "torch" if cfg.impl in ("foreach", "for-loop") else "auto"
    return FusedAdamW(params, lr=lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay, impl=impl)


def adamw8bit(params: Iterable[torch.nn.Parameter], cfg: OptimConfig, lr: float | torch.Tensor) -> AdamW8bit:
    return AdamW8bit(params, lr=lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay)


def adafactor(params: Iterable[torch.nn.Parameter], cfg: OptimConfig, lr: float | torch.Tensor) -> Adafactor:
    return Adafactor(params, lr=lr, betas=(cfg.betas[0], cfg.betas[1]), weight_decay=cfg.weight_decay)


EXTRA_OPTIMIZERS = {"fused_adamw": fused_adamw, "adamw8bit": adamw8bit, "adafactor": adafactor}
