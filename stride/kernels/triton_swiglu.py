"""SwiGLU activation silu(gate) * up in Triton, forward and backward in one pass each.

Why: eager runs silu, the product, and (for backward) sigmoid and three products as separate kernels;
here the forward reads gate and up once and writes out, and the backward reads gate, up and dout once
and writes both grads, recomputing the sigmoid instead of saving it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from stride.kernels.runtime import check_float
from stride.kernels.triton_cast import cast_to, emulate_bf16

BLOCK = 1024


@triton.jit
def _swiglu_fwd(A, B, OUT, n, BLOCK: tl.constexpr, EMU: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(A + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-a))
    tl.store(OUT + offs, cast_to(a * sig * b, OUT.dtype.element_ty, EMU), mask=mask)


@triton.jit
def _swiglu_bwd(A, B, DOUT, DA, DB, n, BLOCK: tl.constexpr, EMU_A: tl.constexpr, EMU_B: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(A + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(DOUT + offs, mask=mask, other=0.0).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-a))
    silu = a * sig
    da = g * b * sig * (1.0 + a * (1.0 - sig))
    tl.store(DA + offs, cast_to(da, DA.dtype.element_ty, EMU_A), mask=mask)
    tl.store(DB + offs, cast_to(g * silu, DB.dtype.element_ty, EMU_B), mask=mask)


class SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        check_float("swiglu gate", gate)
        check_float("swiglu up", up)
        if gate.shape != up.shape:
            raise ValueError(f"swiglu: gate {tuple(gate.shape)} and up {tuple(up.shape)} must have one shape")
        # gate and up may differ in dtype, as on the torch path (both are read as fp32; the output takes gate's
        # dtype, each gradient its input's): a bf16 up beside an fp32 gate was a ValueError here only (audit 19)
        a, b = gate.contiguous(), up.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        if n:
            _swiglu_fwd[(triton.cdiv(n, BLOCK),)](a, b, out, n, BLOCK=BLOCK, EMU=emulate_bf16(out), num_warps=4)
        ctx.save_for_backward(a, b)
        return out

    @staticmethod
    def backward(ctx, dout):
        a, b = ctx.saved_tensors
        g = dout.contiguous()
        da, db = torch.empty_like(a), torch.empty_like(b)
        n = a.numel()
        if n:
            _swiglu_bwd[(triton.cdiv(n, BLOCK),)](
                a, b, g, da, db, n, BLOCK=BLOCK, EMU_A=emulate_bf16(da), EMU_B=emulate_bf16(db), num_warps=4
            )
        return da, db


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return SwiGLUFunction.apply(gate, up)
