"""FLOPs of one training micro-step, counted once with `torch.utils.flop_counter`.

Counted on the model before activation checkpointing and compilation, so recomputation is not
counted: MFU uses model FLOPs (the PaLM convention), not hardware FLOPs. That holds inside attention too:
a fused (flash / memory-efficient) attention backward recomputes the scores QK^T, and torch's formula for
it counts that recompute (5 batched matmuls, 2.5x the forward); `count_train_flops` counts the 4 the
backward needs (2x the forward), as the unfused math path does (`MODEL_FLOP_FORMULAS`). Outside audit 13
(L2): the recompute was 2.3 % of the quick-start transformer's count (67.1M of 2,867.9M FLOPs a step).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, bmm_flop, sdpa_backward_flop_count, sdpa_flop_count


def _rnn_layer_flops(inp, w_ih, w_hh, *args, **kwargs) -> int:
    """LSTM/GRU layer on oneDNN: per timestep and sample, two GEMMs into the gates (2 FLOPs a MAC)."""
    steps_times_batch = inp[0] * inp[1]
    gates, i = w_ih
    return 2 * steps_times_batch * gates * (i + w_hh[1])


def _rnn_layer_backward_flops(inp, w_ih, w_hh, *args, **kwargs) -> int:
    return 2 * _rnn_layer_flops(inp, w_ih, w_hh)  # input and weight gradients: two GEMMs per forward GEMM


def _cudnn_rnn_flops(inp, weight, *args, batch_sizes=(), **kwargs) -> int:
    """cuDNN's RNN/LSTM/GRU (every layer and direction in one op): per timestep and sample, one GEMM per 2-D weight
    (input, hidden and projection weights, their gates included in the rows; biases are 1-D), 2 FLOPs a MAC. A
    packed input is [sum of the batch sizes, features]."""
    packed = args[12] if len(args) > 12 else batch_sizes  # batch_sizes, after weight_stride0 ... bidirectional
    steps_times_batch = inp[0] if packed else inp[0] * inp[1]
    return 2 * steps_times_batch * sum(s[0] * s[1] for s in weight if len(s) == 2)


def _cudnn_rnn_backward_flops(inp, weight, *args, **kwargs) -> int:
    # input (and hidden) gradients and weight gradients: two GEMMs per forward GEMM, as the oneDNN layer's above
    return 2 * _cudnn_rnn_flops(inp, weight, batch_sizes=args[16] if len(args) > 16 else ())


def _cpu_flash_fwd(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query, key, value)


def _cpu_flash_bwd(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out, query, key, value)


# torch 2.13's flop counter has no entry for the fused CPU kernels: without these an LSTM counts ~0
# and attention (SDPA runs `_scaled_dot_product_flash_attention_for_cpu` on CPU) counts zero. The
# attention formula here is torch's own (the full s x s square; its backward counts the recomputed QK^T),
# the same as torch counts for the CUDA flash kernels: the FLOPs the kernels run, which is what
# stride.perfmodel's operator census times. MFU's model FLOPs are MODEL_FLOP_FORMULAS below.
CPU_FLOP_FORMULAS: dict = {}
_aten = torch.ops.aten
if hasattr(_aten, "mkldnn_rnn_layer"):
    CPU_FLOP_FORMULAS[_aten.mkldnn_rnn_layer] = _rnn_layer_flops
    CPU_FLOP_FORMULAS[_aten.mkldnn_rnn_layer_backward] = _rnn_layer_backward_flops
# ... nor for cuDNN's: an LSTM on CUDA counted only its input and head layers (outside audit of the models; counted
# on CPU, the LSTM is 99.2 % of the lstm tiny step's 6.34 MFLOP and 68.6 % of deeplob tiny's 5.73, 4 rows of 16 steps)
if hasattr(_aten, "_cudnn_rnn"):
    CPU_FLOP_FORMULAS[_aten._cudnn_rnn] = _cudnn_rnn_flops
    CPU_FLOP_FORMULAS[_aten._cudnn_rnn_backward] = _cudnn_rnn_backward_flops
if hasattr(_aten, "_scaled_dot_product_flash_attention_for_cpu"):
    CPU_FLOP_FORMULAS[_aten._scaled_dot_product_flash_attention_for_cpu] = _cpu_flash_fwd
    CPU_FLOP_FORMULAS[_aten._scaled_dot_product_flash_attention_for_cpu_backward] = _cpu_flash_bwd


def sdpa_backward_model_flops(grad_out, query, key, value) -> int:
    """A dense attention core's backward in model FLOPs (shapes [b, h, s, d]): torch's count less its first batched
    matmul, the recomputed scores QK^T. What remains (grad of the scores and of V, then of Q and K) is 4 batched
    matmuls, 2x the forward's 2; the same the math path's autograd runs and the flop counter counts there."""
    b, h_q, s_q, d_q = query
    s_k = key[2]
    return sdpa_backward_flop_count(grad_out, query, key, value) - bmm_flop((b * h_q, s_q, d_q), (b * h_q, d_q, s_k))


def _model_sdpa_bwd(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_model_flops(grad_out, query, key, value)


# The FLOP formulas MFU counts with: the CPU kernels' above, with every dense fused-attention backward (CPU flash,
# CUDA flash, memory-efficient and cuDNN: each takes grad_out, query, key, value first) counted without the
# recompute. Nested / variable-length attention (`_flash_attention_backward`, `_efficient_attention_backward`) and
# FlexAttention, which stride's models do not run, keep torch's formulas (recompute included).
MODEL_FLOP_FORMULAS: dict = dict(CPU_FLOP_FORMULAS)
for _name in ("_scaled_dot_product_flash_attention_for_cpu_backward", "_scaled_dot_product_flash_attention_backward",
              "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_cudnn_attention_backward"):
    if hasattr(_aten, _name):
        MODEL_FLOP_FORMULAS[getattr(_aten, _name)] = _model_sdpa_bwd


def count_train_flops(
    model: nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
) -> int:
    """Forward + backward FLOPs for one batch (x, y). Grads and RNG are left as they were.

    The first count of a process imports torch._dynamo (FlopCounterMode's dispatch mode is wrapped in
    `torch._disable_dynamo`; with it FSDP, DTensor and sympy): ~0.9 s of CPU on the AMD EPYC host. It is not avoided
    here on purpose: every torch optimizer pays the same import when it is built (`Optimizer.add_param_group` carries
    the same wrapper), and every caller of this function trains with one, so a count without the import would only move
    the cost to the optimizer (measured: benchmarks/flop_count_import.py, docs/overhead.md "The first FLOP count")."""
    grads = [p.grad for p in model.parameters()]
    with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
        counter = FlopCounterMode(display=False, custom_mapping=MODEL_FLOP_FORMULAS)
        with counter:
            loss_fn(model(x), y).backward()
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = g
    return int(counter.get_total_flops())
