"""Two ops a packed model needs beyond what `vmap` does by itself: attention and per-model dropout.

- Attention: torch 2.13 has no batching rule for the CPU flash kernel behind
  `F.scaled_dot_product_attention`; vmap falls back to a per-model loop (and warns). `FoldedSDPA`'s vmap
  rule folds the pack into the batch dimension instead, one kernel call for all models: attention is
  independent per batch element, so this is the same computation as each model's own call.
- Dropout: a model's code passes its dropout rate as a Python float, the same for every model sharing
  the module skeleton, while a pack may hold models with different rates. `PackOps` routes `F.dropout`
  (and attention's dropout) to masks drawn per model with that model's rate, under vmap's
  `randomness="different"`. Each model's masks come from a generator of its own, seeded from its own
  `train.seed` (`mask_generators`): they drew from one generator for the chunk, so a model's masks, and its
  losses, depended on its pack size, its companions and its place in the pack (audit 10, F3). The solo run
  draws its masks with torch's own dropout from its global generator, so a packed model with dropout is the same
  training as its solo run in distribution, not bit for bit; a rate of 0 leaves x untouched.

`PackOps` is a TorchFunctionMode installed only when needed (attention present or some rate > 0): it
costs a Python call per torch function in the forward.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


class PackOnly(torch.autograd.Function):
    """An op that exists only inside `vmap`: its `vmap` rule gets the whole pack and runs it at once (the
    ops it calls there are recorded by autograd as usual, so no backward of its own is needed)."""

    generate_vmap_rule = False

    @staticmethod
    def forward(*args):  # type: ignore[override]
        raise RuntimeError("this op runs only inside torch.func.vmap (stride.sweep packs models with it)")

    @staticmethod
    def setup_context(ctx, inputs, output):  # type: ignore[override]
        pass


def stacked(t: torch.Tensor, dim: int | None, n: int) -> torch.Tensor:
    """A vmap rule's input with the pack dimension first (an input shared by the pack is expanded, not copied)."""
    return t.movedim(dim, 0) if dim is not None else t.expand(n, *t.shape)


class FoldedSDPA(PackOnly):
    """`F.scaled_dot_product_attention` for one model inside vmap; the vmap rule runs the pack as one batch."""

    @staticmethod
    def vmap(info, in_dims, q, k, v, is_causal, scale):  # type: ignore[override]
        n = info.batch_size
        qf, kf, vf = (stacked(t, d, n).flatten(0, 1) for t, d in zip((q, k, v), in_dims[:3], strict=True))
        out = F.scaled_dot_product_attention(qf, kf, vf, is_causal=is_causal, scale=scale)
        return out.reshape(n, -1, *out.shape[1:]), 0


MASK_SEED_SALT = 0x5EED_D80F  # a model's mask generator is seeded apart from the weights' (the same train.seed)


def mask_generators(seeds: list[int], device: torch.device) -> list[torch.Generator]:
    """One dropout-mask generator per model, seeded from the model's own `train.seed` (salted, so its masks do not
    replay the draws of its initialisation): a model's masks are then the same in any pack, chunk or order."""
    out = []
    for seed in seeds:
        g = torch.Generator(device=device)
        g.manual_seed((seed * 0x9E3779B97F4A7C15 + MASK_SEED_SALT) % 2**63)
        out.append(g)
    return out


class _Uniforms(PackOnly):
    """Uniform [0, 1) numbers shaped like one model's x; the vmap rule draws each model's from its own generator."""

    @staticmethod
    def vmap(info, in_dims, x, p, gens):  # type: ignore[override]
        n = info.batch_size
        shape = stacked(x, in_dims[0], n).shape
        if len(gens) != n:
            raise RuntimeError(f"{len(gens)} mask generators for a chunk of {n} models")
        u = torch.empty(shape, dtype=torch.float32, device=x.device)
        for j, g in enumerate(gens):  # one draw per model: a chunk of 16 is 16 small draws instead of one
            torch.rand(shape[1:], generator=g, dtype=torch.float32, device=x.device, out=u[j])
        return u, 0


def model_dropout(x: torch.Tensor, p: torch.Tensor, gens: list[torch.Generator] | None = None) -> torch.Tensor:
    """Inverted dropout at this model's rate `p` (a 0-dim tensor, batched over the pack by vmap); the masks from
    the chunk's per-model generators `gens` (None: torch's global generator, as vmap's randomness draws)."""
    u = (_Uniforms.apply(x.detach(), p.detach(), gens) if gens is not None
         else torch.rand_like(x, dtype=torch.float32))
    keep = u >= p
    return x * keep.to(x.dtype) / (1 - p).to(x.dtype)


def _math_attention(q, k, v, is_causal: bool, scale: float | None, p: torch.Tensor,
                    gens: list[torch.Generator] | None = None) -> torch.Tensor:
    s = torch.matmul(q, k.transpose(-2, -1)) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if is_causal:
        t, u = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(t, u, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.matmul(model_dropout(torch.softmax(s.float(), -1).to(q.dtype), p, gens), v)


class PackOps(TorchFunctionMode):
    """Inside the vmapped forward: attention folded over the pack, dropout at each model's own rate.

    `rate` is set per call to the model's rate (a batched 0-dim tensor) or None when every rate is 0;
    `generators`, per forward, to the chunk's models' mask generators (None: torch's global generator).
    """

    def __init__(self) -> None:
        super().__init__()
        self.rate: torch.Tensor | None = None
        self.training = True
        self.generators: list[torch.Generator] | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            return self._attention(*args, **kwargs)
        if func is F.dropout and self.rate is not None:
            x = args[0]
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            return model_dropout(x, self.rate, self.generators) if training else x
        return func(*args, **kwargs)

    def _attention(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if attn_mask is not None or enable_gqa:
            raise ValueError("packed attention supports is_causal masks only (no attn_mask, no GQA)")
        if self.rate is not None and self.training:
            return _math_attention(q, k, v, is_causal, scale, self.rate, self.generators)
        return FoldedSDPA.apply(q, k, v, is_causal, scale)


def uses_attention(model: torch.nn.Module, x: torch.Tensor) -> bool:
    """Whether the model's forward calls `F.scaled_dot_product_attention` (one probe forward, no grad)."""

    class Probe(TorchFunctionMode):
        seen = False

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
            if func is F.scaled_dot_product_attention:
                Probe.seen = True
            return func(*args, **(kwargs or {}))

    was = model.training
    model.eval()
    with torch.no_grad(), Probe():
        model(x)
    model.train(was)
    return Probe.seen
