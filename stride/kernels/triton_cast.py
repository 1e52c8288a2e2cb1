"""Store-side casts for Triton kernels that round bf16 to nearest-even under the interpreter too.

Triton's CPU interpreter converts fp32 to bf16 by truncation (seen with Triton 3.9: half of all
values differ from torch's round-to-nearest-even, all toward zero), which biases every bf16 output of
an interpreter test. With EMULATE set (host side: interpreter and a bf16 output) the rounding is done
with integer arithmetic on the fp32 bits instead; on a GPU the native conversion (already RNE) runs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from stride.kernels.runtime import interpreter_enabled


@triton.jit
def cast_to(x, ty: tl.constexpr, EMULATE: tl.constexpr):
    if EMULATE:
        bits = x.to(tl.float32).to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return x.to(ty)


def emulate_bf16(*tensors: torch.Tensor) -> bool:
    """Whether a kernel writing these outputs must emulate bf16 rounding (interpreter only)."""
    return interpreter_enabled() and any(t.dtype == torch.bfloat16 and not t.is_cuda for t in tensors)
