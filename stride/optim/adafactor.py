"""Adafactor with factored second moments (Shazeer & Stern, 2018), optional momentum.

For a matrix [.., R, C] the second moment is kept as a row EMA [.., R] and a column EMA [.., C]
and rebuilt as their outer product over the row mean: R + C floats instead of R * C. Vectors keep
a full second moment. Updates are RMS-clipped (threshold d) as in the paper. Differences from
`torch.optim.Adafactor`, which exists: an AdamW-style interface (lr from the schedule, betas, decoupled
weight decay, Adam bias correction) so it drops into `[optim]`, and an optional first moment stored
in bf16 (2 bytes/param) that closes most of the quality gap to AdamW on small models.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from stride.optim.dtensor import reject_dtensor
from stride.optim.state import KeepStateDtypes, StateSpec, as_number, check_betas, check_hyperparameters, is_real_number


class Adafactor(KeepStateDtypes, torch.optim.Optimizer):
    """betas = (beta1 or None for no momentum, beta2); eps regularises g^2 (paper's eps1)."""

    _group_keys_needed = frozenset({"clip_threshold", "momentum_dtype"})

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float | torch.Tensor = 1e-3,
        betas: tuple[float | None, float] = (0.9, 0.999),
        eps: float = 1e-30,
        weight_decay: float = 0.0,
        clip_threshold: float = 1.0,
        momentum_dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        params = list(params)
        flat = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
        reject_dtensor(flat, "Adafactor", "factored row/column moments need the full matrix, not a shard")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "clip_threshold": clip_threshold, "momentum_dtype": momentum_dtype}
        self._check_group(defaults, "")
        defaults["betas"] = tuple(betas)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any], where: str) -> None:
        """The constructor's checks, for its defaults and for every param group (given, added or loaded). eps must
        be > 0 in fp32: g^2 + eps of a zero gradient is rsqrt'ed (eps = 0 gave 0 * inf = NaN parameters);
        clip_threshold > 0 (inf: no clipping; 0 divided the update by inf, a negative one flipped it)."""
        check_hyperparameters("Adafactor", group["lr"], group["eps"], group["weight_decay"], where)
        check_betas("Adafactor", group["betas"], where, beta1_may_be_none=True)
        eps = as_number(group["eps"])
        if not float(torch.tensor(float(eps), dtype=torch.float32)) > 0.0:
            raise ValueError(f"Adafactor: {where}eps must be > 0 (in fp32, the smallest is about 1.4e-45): it is "
                             f"added to g^2 before a reciprocal square root, got {group['eps']!r}")
        d = as_number(group["clip_threshold"])
        if not is_real_number(d) or not d > 0.0:
            raise ValueError(f"Adafactor: {where}clip_threshold must be a number > 0 (float('inf') turns the update "
                             f"clipping off), got {group['clip_threshold']!r}")
        dt = group["momentum_dtype"]
        if not isinstance(dt, torch.dtype) or not dt.is_floating_point:
            raise ValueError(f"Adafactor: {where}momentum_dtype must be a floating-point torch.dtype (the first "
                             f"moment is stored in it), got {dt!r}")

    def _state_spec(self, p: torch.Tensor, group: dict[str, Any]) -> StateSpec:
        f32 = torch.float32
        if p.dim() >= 2:
            spec = {"row_sq": (tuple(p.shape[:-1]), f32, True), "col_sq": ((*p.shape[:-2], p.shape[-1]), f32, True)}
        else:
            spec = {"exp_avg_sq": (tuple(p.shape), f32, True)}
        if group["betas"][0] is not None:
            spec["exp_avg"] = (tuple(p.shape), group["momentum_dtype"], True)
        return spec

    def _init_state(self, p: torch.Tensor, group: dict[str, Any]) -> dict[str, Any]:
        state = self.state[p]
        if state:
            return state
        state["step"] = torch.tensor(0.0)
        if p.dim() >= 2:
            state["row_sq"] = torch.zeros(p.shape[:-1], dtype=torch.float32, device=p.device)
            state["col_sq"] = torch.zeros((*p.shape[:-2], p.shape[-1]), dtype=torch.float32, device=p.device)
        else:
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
        if group["betas"][0] is not None:
            state["exp_avg"] = torch.zeros_like(p, dtype=group["momentum_dtype"])
        return state

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, wd, eps, d = float(group["lr"]), group["weight_decay"], group["eps"], group["clip_threshold"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Adafactor does not support sparse gradients")
                state = self._init_state(p, group)
                state["step"] += 1
                t = int(state["step"].item())
                g = p.grad.float()
                g2 = g.square().add_(eps)
                if p.dim() >= 2:
                    row, col = state["row_sq"], state["col_sq"]
                    row.lerp_(g2.mean(-1), 1.0 - beta2)
                    col.lerp_(g2.mean(-2), 1.0 - beta2)
                    r = row / row.mean(-1, keepdim=True)
                    # rsqrt(v_hat) = rsqrt(row_i / mean(row)) * rsqrt(col_j): no R x C second moment kept
                    update = g * r.rsqrt_().unsqueeze(-1) * col.rsqrt().unsqueeze(-2)
                else:
                    v = state["exp_avg_sq"]
                    v.lerp_(g2, 1.0 - beta2)
                    update = g * v.rsqrt()
                update.mul_((1.0 - beta2**t) ** 0.5)  # bias correction of the second moment
                update.div_((update.square().mean().sqrt() / d).clamp_min(1.0))
                if beta1 is not None:
                    m = state["exp_avg"]
                    mf = m.float().lerp_(update, 1.0 - beta1)
                    m.copy_(mf)
                    update = mf / (1.0 - beta1**t)
                pf = p.float() if p.dtype != torch.float32 else p
                pf.mul_(1.0 - lr * wd).add_(update, alpha=-lr)
                if pf is not p:
                    p.copy_(pf)
        return loss
