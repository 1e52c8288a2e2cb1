"""Optimizer-state helpers shared by stride's optimizers: byte accounting and dtype-keeping loads.

`torch.optim.Optimizer.load_state_dict` casts every floating-point state tensor to its parameter's
dtype. That would turn 8-bit moments into fp32 and fp32 moments of bf16 parameters into bf16 (lossy),
so stride's optimizers restore the saved dtypes after loading (and copy, never alias, the saved tensors).
"""

from __future__ import annotations

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


class KeepStateDtypes:
    """Mixin for torch.optim.Optimizer subclasses whose state dtypes differ from the parameters'."""

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
                self.state[p][key] = value.to(device=device, copy=True)  # type: ignore[attr-defined]


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
