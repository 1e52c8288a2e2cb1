"""Attention's backward in model FLOPs (outside audit 13, L2): 2x the forward, not torch's 2.5x (its flash formula
counts the recomputed QK^T), checked by hand and against the kernel count, which stays available to the perfmodel."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from stride.metrics.flops import CPU_FLOP_FORMULAS, count_train_flops


class SelfAttention(torch.nn.Module):
    """q, k, v projections, the attention core (CPU flash kernel), an output projection: [B, S, D] -> [B, S, D]."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.h = heads
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.out = torch.nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        return self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, d))


def test_attention_backward_is_twice_its_forward_by_hand() -> None:
    torch.manual_seed(0)
    b, s, d, h = 4, 32, 32, 4
    model = SelfAttention(d, h)
    x, y = torch.randn(b, s, d), torch.randn(b, s, d)
    n = b * s
    # linears: 2 FLOPs a MAC forward; backward the weight gradient, and the input gradient where the input needs one
    # (qkv's input x does not)
    qkv_fwd, out_fwd = 2 * n * d * 3 * d, 2 * n * d * d
    linears = qkv_fwd + qkv_fwd + 3 * out_fwd
    core_fwd = 2 * (2 * b * h * s * s * (d // h))  # QK^T and AV
    model_count = linears + core_fwd + 2 * core_fwd  # backward: grads of the scores, V, Q and K (4 bmms)
    assert count_train_flops(model, F.mse_loss, x, y) == model_count
    # torch's kernel count (what the flash backward runs) has one more bmm, the recomputed QK^T: 2.5x the forward
    with FlopCounterMode(display=False, custom_mapping=CPU_FLOP_FORMULAS) as kernel:
        F.mse_loss(model(x), y).backward()
    assert kernel.get_total_flops() == model_count + core_fwd // 2
