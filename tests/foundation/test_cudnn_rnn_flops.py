"""An LSTM on CUDA runs cuDNN's fused RNN op, for which torch's flop counter has no formula: checked on meta tensors
(cuDNN's op has a meta kernel), so a CPU-only host tests the count MFU reads on a GPU."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from stride.metrics.flops import MODEL_FLOP_FORMULAS

aten = torch.ops.aten


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, device="meta")


@pytest.mark.parametrize(("layers", "bidirectional", "batch_first"), [(1, False, True), (2, True, False)])
def test_cudnn_lstm_counts_its_gemms_forward_and_backward(layers: int, bidirectional: bool, batch_first: bool) -> None:
    # Before: 0 FLOPs for the whole LSTM, so lstm and deeplob on a GPU read an MFU of their input and head layers only
    b, t, i, h = 4, 10, 8, 16
    dirs = 2 if bidirectional else 1
    weights = []
    for layer in range(layers):
        for _ in range(dirs):
            weights += [_meta(4 * h, i if layer == 0 else h * dirs), _meta(4 * h, h), _meta(4 * h), _meta(4 * h)]
    x = _meta(b, t, i) if batch_first else _meta(t, b, i)
    hx = _meta(layers * dirs, b, h)
    counter = FlopCounterMode(display=False, custom_mapping=MODEL_FLOP_FORMULAS)
    with counter:
        aten._cudnn_rnn(x, weights, 4, None, hx, hx, 2, h, 0, layers, batch_first, 0.0, True, bidirectional, [], None)
    # by hand: per step and sample, 4h x (in + h) MACs per layer and direction, 2 FLOPs a MAC
    macs = sum(4 * h * ((i if layer == 0 else h * dirs) + h) for layer in range(layers)) * dirs
    assert counter.get_total_flops() == 2 * b * t * macs
    backward = MODEL_FLOP_FORMULAS[aten._cudnn_rnn_backward]
    args = (x, weights, 4, None, hx, hx, x, x, hx, hx, 2, h, 0, layers, batch_first, 0.0, True, bidirectional, [], None,
            x, [True, True, True, True])
    shapes = [[w.shape for w in a] if isinstance(a, list) and a and isinstance(a[0], torch.Tensor)
              else a.shape if isinstance(a, torch.Tensor) else a for a in args]
    assert backward(*shapes) == 2 * 2 * b * t * macs


def test_cudnn_and_onednn_lstm_counts_agree() -> None:
    """The same LSTM counted as the oneDNN layer the CPU runs (stride's formula, checked by hand in test_models'
    workloads) and as cuDNN's op: one forward count."""
    b, t, i, h = 3, 7, 5, 6
    lstm = torch.nn.LSTM(i, h, batch_first=True)
    counter = FlopCounterMode(display=False, custom_mapping=MODEL_FLOP_FORMULAS)
    with counter, torch.no_grad():
        lstm(torch.randn(b, t, i))
    cpu = counter.get_total_flops()
    weights = [_meta(*p.shape) for p in lstm._flat_weights]
    with counter:
        aten._cudnn_rnn(_meta(b, t, i), weights, 4, None, _meta(1, b, h), _meta(1, b, h), 2, h, 0, 1, True, 0.0, True,
                        False, [], None)
    assert cpu == 2 * b * t * 4 * h * (i + h) and counter.get_total_flops() == cpu
