"""N models of one architecture as one: parameters stacked, one forward for the whole pack.

The models are built exactly as `stride train` builds each (seed, then `build_model`), so every model
starts where its solo run starts. `torch.func.stack_module_state` stacks their parameters along a new
leading dimension; a parameter-free copy of the first model (on the meta device) is the skeleton that
`vmap(functional_call)` runs with each model's slice. nn.LSTM is swapped for `VmapLSTM` in the skeleton
(see grouped_lstm.py); attention and per-model dropout go through `PackOps` (vmap_ops.py).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from stride.sweep.grouped_lstm import swap_lstms
from stride.sweep.vmap_ops import PackOps, uses_attention


class PackedModel:
    """The stacked state of `models` (all on one device, one dtype) and the pack's forward.

    `params` maps each parameter name to a leaf tensor [N, *shape] that autograd fills with the N
    models' gradients; `dropout` holds each model's rate.
    """

    def __init__(self, models: list[nn.Module], dropout: list[float], sample: torch.Tensor) -> None:
        if not models:
            raise ValueError("a pack needs at least one model")
        self.n = len(models)
        shapes = {k: tuple(v.shape) for k, v in models[0].state_dict().items()}
        for i, m in enumerate(models[1:], 1):
            other = {k: tuple(v.shape) for k, v in m.state_dict().items()}
            if other != shapes:
                diff = sorted(k for k in set(shapes) | set(other) if shapes.get(k) != other.get(k))
                raise ValueError(f"pack model {i} has other parameter shapes than model 0: {', '.join(diff[:4])}")
        self.attention = uses_attention(models[0], sample)
        self.state_keys = list(models[0].state_dict())  # persistent entries only (not RoPE caches)
        params, buffers = stack_module_state(models)
        self.params: dict[str, torch.Tensor] = params
        self.buffers: dict[str, torch.Tensor] = buffers
        skeleton = copy.deepcopy(models[0])
        self.lstms = swap_lstms(skeleton)
        self.skeleton = skeleton.to("meta")
        device = next(iter(params.values())).device
        self.dropout = torch.tensor(dropout, dtype=torch.float32, device=device)
        self.any_dropout = any(p > 0 for p in dropout)
        self._ops = PackOps() if (self.attention or self.any_dropout) else None
        self._training = True

    # -- modes --------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> PackedModel:
        self._training = mode
        self.skeleton.train(mode)
        return self

    def eval(self) -> PackedModel:
        return self.train(False)

    # -- forward ------------------------------------------------------------------------------
    def _one(self, params: dict, buffers: dict, x: torch.Tensor, rate: torch.Tensor) -> torch.Tensor:
        if self._ops is not None:
            self._ops.rate = rate if self.any_dropout else None
            self._ops.training = self._training
        return functional_call(self.skeleton, (params, buffers), (x,))

    def __call__(self, x: torch.Tensor, shared: bool = True) -> torch.Tensor:
        """Predictions [N, B, ...] for inputs x [B, ...] given to every model (`shared`) or x [N, B, ...]."""
        fn = vmap(self._one, in_dims=(0, 0, None if shared else 0, 0), randomness="different")
        with self._ops if self._ops is not None else contextlib.nullcontext():
            return fn(self.params, self.buffers, x, self.dropout)

    # -- one model's state ----------------------------------------------------------------------
    def state_dict_of(self, i: int) -> dict[str, torch.Tensor]:
        """Model i's parameters and buffers, keyed as its own module's state dict (detached copies)."""
        both = {**self.params, **self.buffers}
        return {k: both[k][i].detach().clone() for k in self.state_keys}

    def parameters(self) -> Iterator[torch.Tensor]:
        return iter(self.params.values())

    def n_params_each(self) -> int:
        return sum(v[0].numel() for v in self.params.values())
