"""Rotary position embedding in Triton for x [..., T, D] with interleaved pairs (x[2i], x[2i+1]).

Why: eager splits x into even/odd views, upcasts, multiplies and re-stacks (several full passes and
temporaries); one kernel reads x and the small cos/sin tables and writes the rotated x. The backward is
the same rotation by the negative angle, so it reuses the forward kernel with sin negated.

Two kernels: the first GPU run (H200, 2026-12-04) timed the strided one, which loads the even and the odd
elements as two stride-2 streams, at 2.27 ms for forward + backward of 8x32x2048x128 bf16, where
torch.compile took 0.45 ms. The row kernel reads each row as one contiguous run and splits the pairs in
registers; benchmarks/kernels.py times both (`stride-triton`, `stride-strided`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from stride.kernels.reference import check_rope
from stride.kernels.runtime import check_float, next_pow2
from stride.kernels.triton_cast import cast_to, emulate_bf16


@triton.jit
def _rope_kernel(
    X, COS, SIN, Y, n_rows, seq_len, half, sign, BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr, EMU: tl.constexpr
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_H)
    rmask = rows < n_rows
    cmask = cols < half
    mask = rmask[:, None] & cmask[None, :]
    pos = rows % seq_len
    tab = pos.to(tl.int64)[:, None] * half + cols[None, :]
    c = tl.load(COS + tab, mask=mask, other=0.0).to(tl.float32)
    s = tl.load(SIN + tab, mask=mask, other=0.0).to(tl.float32) * sign
    even = rows.to(tl.int64)[:, None] * (2 * half) + 2 * cols[None, :]
    x1 = tl.load(X + even, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(X + even + 1, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + even, cast_to(x1 * c - x2 * s, Y.dtype.element_ty, EMU), mask=mask)
    tl.store(Y + even + 1, cast_to(x1 * s + x2 * c, Y.dtype.element_ty, EMU), mask=mask)


@triton.jit
def _rope_rows_kernel(X, COS, SIN, Y, n_rows, seq_len, sign, HALF: tl.constexpr, BLOCK_M: tl.constexpr,
                      EMU: tl.constexpr):
    """The same rotation on whole rows: each row of x is read and written as one contiguous run (wide
    loads), and split into its (even, odd) pairs in registers. HALF must be a power of two."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < n_rows
    tab = (rows % seq_len).to(tl.int64)[:, None] * HALF + tl.arange(0, HALF)[None, :]
    c = tl.load(COS + tab, mask=rmask[:, None], other=0.0).to(tl.float32)
    s = tl.load(SIN + tab, mask=rmask[:, None], other=0.0).to(tl.float32) * sign
    full = rows.to(tl.int64)[:, None] * (2 * HALF) + tl.arange(0, 2 * HALF)[None, :]
    x = tl.load(X + full, mask=rmask[:, None], other=0.0).to(tl.float32)
    x1, x2 = tl.split(tl.reshape(x, (BLOCK_M, HALF, 2)))
    y = tl.reshape(tl.join(x1 * c - x2 * s, x1 * s + x2 * c), (BLOCK_M, 2 * HALF))
    tl.store(Y + full, cast_to(y, Y.dtype.element_ty, EMU), mask=rmask[:, None])


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float, rows: bool | None) -> torch.Tensor:
    xc = x.contiguous()
    t, d = x.shape[-2], x.shape[-1]
    if d == 0:  # an empty head dimension: the empty result the torch op gives (n_rows below divides by d)
        return torch.empty_like(xc)
    half = d // 2
    n_rows = xc.numel() // d
    y = torch.empty_like(xc)
    block_h = next_pow2(half)
    block_m = max(1, min(64, 4096 // block_h))
    if rows is None:
        rows = block_h == half
    elif rows and block_h != half:  # tl.arange(0, HALF) needs a power of two: an InterpreterError deep in Triton
        raise ValueError(f"rope: rows=True needs D/2 a power of two, got D = {d}; use rows=None or False")
    if n_rows and rows:
        _rope_rows_kernel[(triton.cdiv(n_rows, block_m),)](
            xc, cos, sin, y, n_rows, t, sign, HALF=half, BLOCK_M=block_m, EMU=emulate_bf16(y), num_warps=4
        )
    elif n_rows:
        _rope_kernel[(triton.cdiv(n_rows, block_m),)](
            xc, cos, sin, y, n_rows, t, half, sign, BLOCK_M=block_m, BLOCK_H=block_h, EMU=emulate_bf16(y), num_warps=4
        )
    return y


class RoPEFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin, rows=None):
        check_float("rope x", x)
        c, s = check_rope(x, cos, sin)
        c, s = c.contiguous(), s.contiguous()
        ctx.save_for_backward(c, s)
        ctx.rows = rows
        return _rotate(x, c, s, 1.0, rows)

    @staticmethod
    def backward(ctx, dy):
        c, s = ctx.saved_tensors
        return _rotate(dy, c, s, -1.0, ctx.rows), None, None, None


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rows: bool | None = None) -> torch.Tensor:
    """cos/sin are constants here (no gradient flows into the tables). `rows`: whole-row kernel (default
    where the head dim's half is a power of two) or the strided pair kernel (any size); both are tested."""
    return RoPEFunction.apply(x, cos, sin, rows)
