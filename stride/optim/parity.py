"""A small, deterministic regression workload for comparing optimizers' quality and state memory.

A fixed random teacher MLP (plus noise) generates targets; a student MLP with matrices large enough
for 8-bit and factored state to apply (256 x 256) is trained with a warmup + cosine schedule. The
figure of merit is the final validation MSE; the noise floor is `noise**2`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from stride.optim.state import optimizer_param_count, optimizer_state_bytes


@dataclass
class ParityResult:
    name: str
    val_loss: float
    state_bytes: int
    n_params: int

    @property
    def bytes_per_param(self) -> float:
        return self.state_bytes / self.n_params


def _mlp(d_in: int, hidden: int, gen: torch.Generator) -> nn.Sequential:
    net = nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                        nn.Linear(hidden, 1))
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / math.sqrt(p.shape[-1]) if p.dim() > 1 else 0.0))
    return net


def run_regression(
    name: str,
    make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    *,
    steps: int = 300,
    batch: int = 128,
    d_in: int = 16,
    hidden: int = 256,
    noise: float = 0.1,
    seed: int = 0,
) -> ParityResult:
    """Train the student from a fixed init on fixed data; returns final val MSE and state bytes."""
    gen = torch.Generator().manual_seed(seed)
    teacher = _mlp(d_in, 64, gen)
    x_train = torch.randn(steps * batch, d_in, generator=gen)
    x_val = torch.randn(2048, d_in, generator=gen)
    with torch.no_grad():
        y_train = teacher(x_train) + noise * torch.randn(len(x_train), 1, generator=gen)
        y_val = teacher(x_val) + noise * torch.randn(len(x_val), 1, generator=gen)
    student = _mlp(d_in, hidden, gen)
    params = list(student.parameters())
    opt = make_optimizer(params)
    base = [float(g["lr"]) for g in opt.param_groups]
    warmup = max(1, steps // 20)
    for step in range(steps):
        if step < warmup:
            frac = (step + 1) / warmup
        else:
            frac = 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))
        for g, lr in zip(opt.param_groups, base, strict=True):
            g["lr"] = lr * max(frac, 0.02)
        xb, yb = x_train[step * batch : (step + 1) * batch], y_train[step * batch : (step + 1) * batch]
        loss = nn.functional.mse_loss(student(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    with torch.no_grad():
        val = nn.functional.mse_loss(student(x_val), y_val).item()
    return ParityResult(name, val, optimizer_state_bytes(opt), optimizer_param_count(opt))
