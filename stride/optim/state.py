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


def as_number(value: object) -> object:
    return value.item() if torch.is_tensor(value) and value.numel() == 1 else value


def is_real_number(v: object) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)  # numpy scalars are Real, as torch takes them


def check_hyperparameters(name: str, lr: object, eps: object, weight_decay: object, where: str = "") -> None:
    """Refuse what torch.optim.AdamW refuses (lr < 0, eps < 0, weight_decay < 0, or not numbers), naming the optimizer,
    `where` (a param group, "" for the constructor's defaults) and the value. Why: a negative eps divided by
    sqrt(v) + eps near zero moved parameters to 9.8 in 3 steps at lr 1e-3 (audit 8, #9); the `[optim]` config checks
    CLI runs, this checks the Python API."""
    for key, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
        v = as_number(value)
        if not is_real_number(v):
            raise ValueError(f"{name}: {where}{key} must be a number, got {value!r}")
        if not v >= 0.0:  # torch's own test: NaN and negatives fail, inf passes
            raise ValueError(f"{name}: {where}{key} must be a number >= 0, got {value!r}")


def check_betas(name: str, betas: object, where: str = "", beta1_may_be_none: bool = False) -> tuple:
    """Two numbers in [0, 1) (beta1 None where the optimizer has no momentum); returns them as a tuple of floats.
    Why: (0.9,) failed at the first step with an unpacking error and (1.5, 2.0) gave NaN or complex parameters."""
    none = " (beta1 may be None)" if beta1_may_be_none else ""
    msg = f"{name}: {where}betas must be two numbers in [0, 1){none}, got {betas!r}"
    if isinstance(betas, str | bytes) or not isinstance(betas, tuple | list) or len(betas) != 2:
        raise ValueError(msg)
    out = []
    for i, b in enumerate(betas):
        if b is None and i == 0 and beta1_may_be_none:
            out.append(None)
            continue
        v = as_number(b)
        if not is_real_number(v) or not 0.0 <= v < 1.0:
            raise ValueError(msg)
        out.append(float(v))
    return tuple(out)


StateSpec = dict[str, tuple[tuple[int, ...], torch.dtype, bool]]  # key -> (shape, dtype, other floats converted)


class KeepStateDtypes:
    """Mixin for torch.optim.Optimizer subclasses whose state dtypes differ from the parameters': checks every
    param group's hyperparameters and every loaded state tensor before anything is stored.

    Subclasses give `_check_group(group, where)` (the constructor's checks, for one group's values) and
    `_state_spec(p, group)`: the keys a parameter's state holds beside "step", each with its shape, dtype and whether
    another floating dtype is converted (fp32 moments: a torch.optim.AdamW state dict of bf16 parameters holds bf16
    moments; the upcast is exact) or refused (8-bit codes). `load_state_dict` refuses, before changing anything, a
    state whose keys, shapes or dtypes differ, naming the parameter (group and position), the key and both shapes.
    Why: without this the Triton kernels wrote past the end of too-small buffers (heap corruption: bf16 moments in
    FusedAdamW, audit 8 #2; 8-bit codes of a smaller parameter in AdamW8bit), and another optimizer's state failed
    steps later with a KeyError, or (fp32 moments in AdamW8bit) stayed fp32 forever."""

    # param-group keys that mark a state dict as another optimizer's: keys this optimizer's groups always have
    # (Adafactor's clip_threshold; torch.optim.AdamW's groups lack them), and keys of an optimizer whose state means
    # something else under the same names (Adafactor's exp_avg is a moment of normalised updates, not of gradients)
    _group_keys_needed: frozenset[str] = frozenset()
    _group_keys_foreign: frozenset[str] = frozenset()

    def _check_group(self, group: dict[str, Any], where: str) -> None:
        raise NotImplementedError

    def _state_spec(self, p: torch.Tensor, group: dict[str, Any]) -> StateSpec:
        raise NotImplementedError

    def _spec_note(self, p: torch.Tensor, group: dict[str, Any]) -> str:
        """Why the spec is what it is, for the message (AdamW8bit: 8-bit or fp32 moments by size)."""
        return ""

    def _prepare_state_dict(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """A hook to convert older formats before the checks (AdamW8bit's state format 1)."""
        return state_dict

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if isinstance(param_group, dict) and hasattr(self, "defaults"):  # torch sets defaults before adding groups
            merged = {**self.defaults, **{k: v for k, v in param_group.items() if k != "params"}}  # type: ignore
            self._check_group(merged, f"param group {len(self.param_groups)}: ")  # type: ignore[attr-defined]
        super().add_param_group(param_group)  # type: ignore[misc]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        name = f"{type(self).__name__}.load_state_dict"
        for gi, g in enumerate(state_dict["param_groups"]):
            missing, foreign = sorted(self._group_keys_needed - set(g)), sorted(self._group_keys_foreign & set(g))
            if missing or foreign:
                has = f"lacks {missing}" if missing else f"has {foreign}"
                raise ValueError(f"{name}: param group {gi} of the state dict {has} (its keys: "
                                 f"{sorted(k for k in g if k != 'params')}): it was written by another optimizer, "
                                 f"whose state {type(self).__name__} does not convert")
        state_dict = self._prepare_state_dict(state_dict)
        saved_groups = state_dict["param_groups"]
        own = self.param_groups  # type: ignore[attr-defined]
        if len(saved_groups) != len(own) or any(len(s["params"]) != len(g["params"])
                                                for s, g in zip(saved_groups, own, strict=True)):
            super().load_state_dict(state_dict)  # type: ignore[misc]  # torch's own message for that
            return
        # other keys a saved group lacks (an older version's) take this optimizer's defaults
        groups = [{**self.defaults, **g} for g in saved_groups]  # type: ignore[attr-defined]
        for gi, g in enumerate(groups):
            self._check_group(g, f"param group {gi} of the loaded state dict: ")
        saved_states = state_dict["state"]
        plan: list[tuple[torch.Tensor, dict[str, Any], StateSpec]] = []
        for gi, (g, cur) in enumerate(zip(groups, own, strict=True)):
            for j, (pid, p) in enumerate(zip(g["params"], cur["params"], strict=True)):
                saved = saved_states.get(pid)
                if not saved:
                    continue
                spec = self._state_spec(p, g)
                where = f"{name}: parameter {pid} (group {gi}, position {j}, shape {tuple(p.shape)})"
                expected = set(spec) | {"step"}
                if set(saved) != expected:
                    raise ValueError(f"{where} has state keys {sorted(saved)}; {type(self).__name__} keeps "
                                     f"{sorted(expected)} for it{self._spec_note(p, g)}. The state dict was written "
                                     "by another optimizer or for other parameters")
                step = as_number(saved["step"])
                if not is_real_number(step) or not 0 <= step < float("inf"):
                    raise ValueError(f"{where}: state 'step' must be a number >= 0, got {saved['step']!r}")
                for key, (shape, dtype, convert) in spec.items():
                    v = saved[key]
                    if not torch.is_tensor(v):
                        raise ValueError(f"{where}: state {key!r} is a {type(v).__name__}, not a tensor")
                    if tuple(v.shape) != shape:
                        raise ValueError(f"{where}: state {key!r} has shape {tuple(v.shape)}, expected {shape}"
                                         f"{self._spec_note(p, g)}")
                    if v.dtype != dtype and not (convert and v.is_floating_point()):
                        kind = f"{dtype} (or another floating dtype, converted)" if convert else str(dtype)
                        raise ValueError(f"{where}: state {key!r} is {v.dtype}, expected {kind}")
                plan.append((p, saved, spec))
        super().load_state_dict({**state_dict, "param_groups": groups})  # type: ignore[misc]
        for p, saved, spec in plan:
            # copies: torch's loader would share the saved `step` tensor with the state dict, and cast the rest to
            # the parameter's dtype
            step = saved["step"]
            self.state[p]["step"] = (step.to(dtype=torch.float32, copy=True).reshape(()) if torch.is_tensor(step)  # type: ignore[attr-defined]
                                     else torch.tensor(float(step)))
            for key, (_, dtype, _) in spec.items():
                self.state[p][key] = saved[key].to(device=p.device, dtype=dtype, copy=True)  # type: ignore[attr-defined]


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
