"""FLOPs of one training micro-step, counted once with `torch.utils.flop_counter`.

Counted on the model before activation checkpointing and compilation, so recomputation is not
counted: MFU uses model FLOPs (the PaLM convention), not hardware FLOPs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def _rnn_layer_flops(inp, w_ih, w_hh, *args, **kwargs) -> int:
    """LSTM/GRU layer on oneDNN: per timestep and sample, two GEMMs into the gates (2 FLOPs a MAC)."""
    steps_times_batch = inp[0] * inp[1]
    gates, i = w_ih
    return 2 * steps_times_batch * gates * (i + w_hh[1])


def _rnn_layer_backward_flops(inp, w_ih, w_hh, *args, **kwargs) -> int:
    return 2 * _rnn_layer_flops(inp, w_ih, w_hh)  # input and weight gradients: two GEMMs per forward GEMM


# torch's flop counter has no formula for the fused CPU RNN kernels; without these an LSTM counts ~0.
_CUSTOM: dict = {}
if hasattr(torch.ops.aten, "mkldnn_rnn_layer"):
    _CUSTOM[torch.ops.aten.mkldnn_rnn_layer] = _rnn_layer_flops
    _CUSTOM[torch.ops.aten.mkldnn_rnn_layer_backward] = _rnn_layer_backward_flops


def count_train_flops(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
) -> int:
    """Forward + backward FLOPs for one batch (x, y). Grads and RNG are left as they were."""
    grads = [p.grad for p in model.parameters()]
    with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
        counter = FlopCounterMode(display=False, custom_mapping=_CUSTOM)
        with counter:
            loss_fn(model(x), y).backward()
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = g
    return int(counter.get_total_flops())
