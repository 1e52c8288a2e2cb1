"""FLOPs of one training micro-step, counted once with `torch.utils.flop_counter`.

Counted on the model before activation checkpointing and compilation, so recomputation is not
counted: MFU uses model FLOPs (the PaLM convention), not hardware FLOPs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count


def _rnn_layer_flops(inp, w_ih, w_hh, *args, **kwargs) -> int:
    """LSTM/GRU layer on oneDNN: per timestep and sample, two GEMMs into the gates (2 FLOPs a MAC)."""
    steps_times_batch = inp[0] * inp[1]
    gates, i = w_ih
    return 2 * steps_times_batch * gates * (i + w_hh[1])


def _rnn_layer_backward_flops(inp, w_ih, w_hh, *args, **kwargs) -> int:
    return 2 * _rnn_layer_flops(inp, w_ih, w_hh)  # input and weight gradients: two GEMMs per forward GEMM


def _cpu_flash_fwd(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query, key, value)


def _cpu_flash_bwd(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out, query, key, value)


# torch 2.13's flop counter has no entry for the fused CPU kernels: without these an LSTM counts ~0
# and attention (SDPA runs `_scaled_dot_product_flash_attention_for_cpu` on CPU) counts zero. The
# attention formula is torch's own (the full s x s square; its backward counts the recomputed QK^T),
# the same as torch counts for the CUDA flash kernels, so CPU and GPU MFU use one convention.
CPU_FLOP_FORMULAS: dict = {}
_aten = torch.ops.aten
if hasattr(_aten, "mkldnn_rnn_layer"):
    CPU_FLOP_FORMULAS[_aten.mkldnn_rnn_layer] = _rnn_layer_flops
    CPU_FLOP_FORMULAS[_aten.mkldnn_rnn_layer_backward] = _rnn_layer_backward_flops
if hasattr(_aten, "_scaled_dot_product_flash_attention_for_cpu"):
    CPU_FLOP_FORMULAS[_aten._scaled_dot_product_flash_attention_for_cpu] = _cpu_flash_fwd
    CPU_FLOP_FORMULAS[_aten._scaled_dot_product_flash_attention_for_cpu_backward] = _cpu_flash_bwd


def count_train_flops(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
) -> int:
    """Forward + backward FLOPs for one batch (x, y). Grads and RNG are left as they were."""
    grads = [p.grad for p in model.parameters()]
    with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
        counter = FlopCounterMode(display=False, custom_mapping=CPU_FLOP_FORMULAS)
        with counter:
            loss_fn(model(x), y).backward()
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = g
    return int(counter.get_total_flops())
