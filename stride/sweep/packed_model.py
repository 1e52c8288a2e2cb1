"""N models of one architecture as one: parameters in one flat buffer, the forward run a chunk of models at once.

The models are built exactly as `stride train` builds each (seed, then `build_model`), so every model
starts where its solo run starts. Their parameters are copied into one flat buffer [N, P] (row i: model i's
parameters side by side, each starting on a 64-byte boundary), with a gradient buffer of the same layout,
so that clipping, the optimizer, masks and zeroing are one operation on a block of rows, whatever the
number of parameter tensors. `params[name]` is the [N, *shape] view of one parameter.

The forward runs `vmap(functional_call(skeleton, params_i, x))` over a *chunk* of models (rows lo..hi-1):
the skeleton is a parameter-free copy of the first model (meta device); a chunk's parameters are leaf views
into the flat buffer whose `.grad` are views into the gradient buffer, so autograd accumulates every
model's gradient in place, in its row. A pack may train chunk by chunk (stride.sweep.packed_train), which
bounds the activations autograd keeps to a chunk's.
nn.LSTM is swapped for `VmapLSTM` in the skeleton (see grouped_lstm.py); attention and per-model dropout go
through `PackOps` (vmap_ops.py); each model's dropout masks come from a generator of its own (`seeds`).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call, vmap

from stride.sweep.grouped_lstm import swap_lstms
from stride.sweep.vmap_ops import PackOps, mask_generators, uses_attention

# A chunk's gradients are row blocks of the flat buffer, strided like their parameters; autograd's layout check
# warns about such non-dense (but matching) strides once, though accumulation into them is exact and in place.
warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")

ALIGN = 16  # elements: each parameter segment starts 64-byte aligned (fp32), as a separately allocated tensor would


@dataclass
class Chunk:
    """Models lo..hi-1 of a pack: leaf parameter views (their .grad in the gradient buffer), buffers, rates."""

    lo: int
    hi: int
    params: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]
    dropout: torch.Tensor

    @property
    def size(self) -> int:
        return self.hi - self.lo


CPU_CHUNK = 16  # models a CPU step trains at once by default (measured: docs/sweep.md, "Round 2")


def default_chunk(n: int, device: torch.device) -> int:
    """Models a step of a pack of n trains at once: all of them on a GPU (launches are what packing saves),
    at most CPU_CHUNK on a CPU. On the 2-core AMD EPYC host 16 transformers at once cost 47 % less CPU per
    model-step than 64 at once (whose activations stream through memory), and at N = 16 smaller chunks cost
    8-16 % more for the MLP, LSTM and transformer alike."""
    return n if device.type != "cpu" else min(n, CPU_CHUNK)


def chunk_bounds(n: int, size: int) -> list[tuple[int, int]]:
    """ceil(n / size) chunks of nearly equal size (they differ by at most one model: at most two shapes)."""
    k = -(-n // max(1, min(size, n)))
    return [(j * n // k, (j + 1) * n // k) for j in range(k)]


class PackedModel:
    """The flat state of `models` (all on one device, one dtype) and the forward of a chunk of them."""

    def __init__(self, models: list[nn.Module], dropout: list[float], sample: torch.Tensor,
                 seeds: list[int] | None = None) -> None:
        """`seeds`: each model's `train.seed`, for its own dropout-mask generator (vmap_ops.mask_generators); None:
        masks from torch's global generator, which makes a model's masks depend on its pack."""
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
        named = [dict(m.named_parameters()) for m in models]
        first = next(iter(named[0].values()))
        if len({p.dtype for p in named[0].values()}) > 1:
            raise ValueError("packed training needs one parameter dtype per model")
        self.layout: dict[str, tuple[int, int, tuple[int, ...]]] = {}  # name -> (offset, numel, shape)
        total = 0
        for name, p in named[0].items():
            self.layout[name] = (total, p.numel(), tuple(p.shape))
            total += -(-p.numel() // ALIGN) * ALIGN
        self.flat = torch.zeros(self.n, total, dtype=first.dtype, device=first.device)
        with torch.no_grad():
            for i, params in enumerate(named):
                for name, (off, numel, _) in self.layout.items():
                    self.flat[i, off : off + numel].copy_(params[name].reshape(-1))
        self.grad = torch.zeros_like(self.flat)
        self.params = {name: self._rows(self.flat, name, 0, self.n) for name in self.layout}
        self.buffers = {k: torch.stack([dict(m.named_buffers())[k] for m in models])
                        for k, _ in models[0].named_buffers()}
        skeleton = copy.deepcopy(models[0])
        self.lstms = swap_lstms(skeleton)
        self.skeleton = skeleton.to("meta")
        self.dropout = torch.tensor(dropout, dtype=torch.float32, device=first.device)
        self.any_dropout = any(p > 0 for p in dropout)
        self._ops = PackOps() if (self.attention or self.any_dropout) else None
        if seeds is not None and len(seeds) != self.n:
            raise ValueError(f"{len(seeds)} seeds for a pack of {self.n} models")
        self.generators = (mask_generators(seeds, first.device) if self.any_dropout and seeds is not None
                           else None)
        self._training = True

    def _rows(self, t: torch.Tensor, name: str, lo: int, hi: int) -> torch.Tensor:
        off, numel, shape = self.layout[name]
        return t[lo:hi, off : off + numel].view(hi - lo, *shape)

    def chunk(self, lo: int, hi: int) -> Chunk:
        """Models lo..hi-1 as a chunk whose parameters are autograd leaves accumulating into `grad` in place."""
        params = {}
        for name in self.layout:
            leaf = self._rows(self.flat, name, lo, hi).requires_grad_()
            leaf.grad = self._rows(self.grad, name, lo, hi)
            params[name] = leaf
        return Chunk(lo, hi, params, {k: v[lo:hi] for k, v in self.buffers.items()}, self.dropout[lo:hi])

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

    def forward(self, chunk: Chunk, x: torch.Tensor, shared: bool = True) -> torch.Tensor:
        """Predictions [c, B, ...] of the chunk's models for x [B, ...] given to each (`shared`) or x [c, B, ...]."""
        fn = vmap(self._one, in_dims=(0, 0, None if shared else 0, 0), randomness="different")
        if self._ops is not None:
            self._ops.generators = self.generators[chunk.lo : chunk.hi] if self.generators is not None else None
        with self._ops if self._ops is not None else contextlib.nullcontext():
            return fn(chunk.params, chunk.buffers, x, chunk.dropout)

    def __call__(self, x: torch.Tensor, shared: bool = True) -> torch.Tensor:
        """Predictions [N, B, ...] of the whole pack (no gradients are kept for its parameters)."""
        whole = Chunk(0, self.n, self.params, self.buffers, self.dropout)
        return self.forward(whole, x, shared)

    # -- one model's state ----------------------------------------------------------------------
    def state_dict_of(self, i: int) -> dict[str, torch.Tensor]:
        """Model i's parameters and buffers, keyed as its own module's state dict (detached copies)."""
        both = {**self.params, **self.buffers}
        return {k: both[k][i].detach().clone() for k in self.state_keys}

    def parameters(self) -> Iterator[torch.Tensor]:
        return iter(self.params.values())

    def n_params_each(self) -> int:
        return sum(numel for _, numel, _ in self.layout.values())
