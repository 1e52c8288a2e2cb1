"""Optimizer-state helpers shared by stride's optimizers: byte accounting and dtype-keeping loads.

`torch.optim.Optimizer.load_state_dict` casts every floating-point state tensor to its parameter's
dtype. That would turn 8-bit moments into fp32 and fp32 moments of bf16 parameters into bf16 (lossy),
so stride's optimizers restore the saved dtypes after loading (and copy, never alias, the saved tensors).
"""

from __future__ import annotations

import numbers
from typing import Any

import torch


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes held in optimizer state tensors (every tensor, step counters included).

    DTensors count their local shard; tensor subclasses that store quantised parts (torchao's 8-bit
    state) count those parts; a tensor referenced from several parameters' states (bitsandbytes'
    shared quantisation maps) counts once."""
    seen: set[tuple[int, int, torch.dtype]] = set()

    def count(t: torch.Tensor) -> int:
        if hasattr(t, "to_local"):
            t = t.to_local()
        if type(t) is not torch.Tensor and hasattr(t, "__tensor_flatten__"):
            names, _ = t.__tensor_flatten__()
            return sum(count(getattr(t, n)) for n in names)
        key = (t.data_ptr(), t.numel(), t.dtype)
        if t.numel() and key in seen:
            return 0
        seen.add(key)
        return t.numel() * t.element_size()

    return sum(count(v) for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v))


def optimizer_param_count(optimizer: torch.optim.Optimizer) -> int:
    return sum(p.numel() for g in optimizer.param_groups for p in g["params"])


def check_hyperparameters(name: str, lr: object, eps: object, weight_decay: object) -> None:
    """Refuse what torch.optim.AdamW refuses (lr < 0, eps < 0, weight_decay < 0, or not numbers), naming the optimizer
    and the value. Why: a negative eps divided by sqrt(v) + eps near zero moved parameters to 9.8 in 3 steps at lr 1e-3
    (audit 8, #9); the `[optim]` config checks CLI runs, this checks the Python API."""
    for key, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
        v = value.item() if torch.is_tensor(value) and value.numel() == 1 else value
        if isinstance(v, bool) or not isinstance(v, numbers.Real):  # numpy scalars are Real, as torch takes them
            raise ValueError(f"{name}: {key} must be a number, got {value!r}")
        if not v >= 0.0:  # torch's own test: NaN and negatives fail, inf passes
            raise ValueError(f"{name}: {key} must be a number >= 0, got {value!r}")


class KeepStateDtypes:
    """Mixin for torch.optim.Optimizer subclasses whose state dtypes differ from the parameters'.

    `_fixed_state_dtypes`: state keys whose dtype the step relies on (FusedAdamW's fp32 moments, which its Triton
    kernel writes as fp32): a loaded tensor of another floating dtype (a torch.optim.AdamW state dict of bf16
    parameters holds bf16 moments) is converted, and one of another shape than its parameter is refused by name.
    Without this the Triton kernel wrote 4-byte values into 2-byte buffers (heap corruption on CPU, audit 8, #2)."""

    _fixed_state_dtypes: dict[str, torch.dtype] = {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)  # type: ignore[misc]
        params = [p for g in self.param_groups for p in g["params"]]  # type: ignore[attr-defined]
        ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        for pid, p in zip(ids, params, strict=True):
            saved = state_dict["state"].get(pid)
            if not saved:
                continue
            for key, value in saved.items():
                if not torch.is_tensor(value):
                    continue
                # copies: torch's loader would share the saved `step` tensor with the state dict
                device = value.device if key == "step" else p.device
                dtype = self._fixed_state_dtypes.get(key)
                if dtype is not None:
                    if value.shape != p.shape:
                        raise ValueError(f"{type(self).__name__}.load_state_dict: state {key!r} of parameter {pid} "
                                         f"has shape {tuple(value.shape)}, its parameter {tuple(p.shape)}")
                    if not value.is_floating_point():
                        raise ValueError(f"{type(self).__name__}.load_state_dict: state {key!r} of parameter {pid} "
                                         f"is {value.dtype}, not a floating-point tensor")
                self.state[p][key] = value.to(device=device, dtype=dtype, copy=True)  # type: ignore[attr-defined]


class RecordsPath:
    """Mixin for optimizers whose step picks its path per call (Triton where the tensors allow, else torch).

    Why: `impl` is a request ("auto", or "triton" that falls back without a GPU), so a run's summary reports
    what the steps actually ran, read from `impl_used` (stride.optim.factory.optimizer_impl)."""

    _ran: frozenset[str] = frozenset()

    # Not traced: under `compile = "model+optimizer"` dynamo dropped this store (impl_used stayed None); eager, it
    # is one graph break in a step that already breaks at each `.item()`.
    @torch.compiler.disable
    def _record(self, path: str) -> None:
        if path not in self._ran:
            self._ran = self._ran | {path}

    @property
    def impl_used(self) -> str | None:
        """The paths the steps ran, "triton", "torch" or "torch+triton" (both); None before the first step."""
        return "+".join(sorted(self._ran)) or None
