"""AdamW with block-wise 8-bit moments: about 2 bytes of state per parameter instead of 8.

Each moment is split into blocks of 256 values; a block stores one fp32 scale (its absmax / 448)
and 256 float8 (e4m3) codes, i.e. 1 + 4/256 bytes per value. The second moment is stored as its
square root: sqrt(v) spans half the dynamic range of v in log terms, so small entries of a block
do not flush to zero (which would turn into an eps-sized denominator and a huge step). The update
itself is computed in fp32 from the dequantised moments; only storage is 8-bit. Tensors smaller
than `min_8bit_size` keep fp32 moments (their state is negligible and they are often norms/biases).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from stride.optim.dtensor import reject_dtensor
from stride.optim.state import KeepStateDtypes

BLOCK = 256
CODE = torch.float8_e4m3fn
CODE_MAX = 448.0  # largest finite e4m3fn value


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [blocks, BLOCK] fp32 -> (codes e4m3 [blocks, BLOCK], scales fp32 [blocks])."""
    scale = x.abs().amax(dim=1).clamp_min(1e-30) / CODE_MAX
    return (x / scale[:, None]).clamp_(-CODE_MAX, CODE_MAX).to(CODE), scale


def dequantize(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return codes.float() * scale[:, None]


class AdamW8bit(KeepStateDtypes, torch.optim.Optimizer):
    """AdamW (decoupled weight decay, bias correction) with block-wise e4m3 moments."""

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float | torch.Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        min_8bit_size: int = 4096,
    ) -> None:
        params = list(params)
        flat = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
        reject_dtensor(
            flat, "AdamW8bit", "block-wise quantised state lives per local shard and DCP cannot reshard it"
        )
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"AdamW8bit: betas must lie in [0, 1), got {betas}")
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                    "min_8bit_size": min_8bit_size}
        super().__init__(params, defaults)

    def _init_state(self, p: torch.Tensor, group: dict[str, Any]) -> dict[str, Any]:
        state = self.state[p]
        if state:
            return state
        state["step"] = torch.tensor(0.0)
        if p.numel() < group["min_8bit_size"]:
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
        else:
            blocks = -(-p.numel() // BLOCK)
            for name in ("exp_avg", "exp_avg_sqrt"):
                state[f"{name}_codes"] = torch.zeros(blocks, BLOCK, dtype=CODE, device=p.device)
                state[f"{name}_scale"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
        return state

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, wd, eps = float(group["lr"]), group["weight_decay"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdamW8bit does not support sparse gradients")
                state = self._init_state(p, group)
                state["step"] += 1
                t = int(state["step"].item())
                bc1, bc2 = 1.0 - beta1**t, 1.0 - beta2**t
                g = p.grad.float()
                if "exp_avg" in state:
                    m, v = state["exp_avg"], state["exp_avg_sq"]
                else:
                    n, blocks = p.numel(), state["exp_avg_codes"].shape[0]
                    g = torch.nn.functional.pad(g.reshape(-1), (0, blocks * BLOCK - n)).view(blocks, BLOCK)
                    m = dequantize(state["exp_avg_codes"], state["exp_avg_scale"])
                    v = dequantize(state["exp_avg_sqrt_codes"], state["exp_avg_sqrt_scale"]).square_()
                m.lerp_(g, 1.0 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
                update = (m / bc1).div_(v.sqrt().div_(bc2**0.5).add_(eps))
                if "exp_avg" not in state:
                    state["exp_avg_codes"], state["exp_avg_scale"] = quantize(m)
                    state["exp_avg_sqrt_codes"], state["exp_avg_sqrt_scale"] = quantize(v.sqrt_())
                    update = update.reshape(-1)[: p.numel()].view_as(p)
                pf = p.float() if p.dtype != torch.float32 else p
                pf.mul_(1.0 - lr * wd).add_(update, alpha=-lr)
                if pf is not p:
                    p.copy_(pf)
        return loss
