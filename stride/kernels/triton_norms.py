"""RMSNorm and LayerNorm in Triton, forward and backward, over row tiles of a [rows, D] matrix.

Why: eager PyTorch runs the fp32 upcast, the reduction, the scale and the cast as separate passes
over memory; one kernel reads x once and writes y once. The backward reads x and dy once, writes dx,
and reduces dw (and db) per program into a small fp32 buffer summed afterwards, so it needs no atomics.
All arithmetic is in fp32 whatever the storage dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from stride.kernels.reference import check_norm_input, check_norm_params
from stride.kernels.runtime import as_rows, check_float, reduction_programs, row_tile
from stride.kernels.triton_cast import cast_to, emulate_bf16


@triton.jit
def _norm_fwd(
    X, W, B, Y, MEAN, RSTD, n_rows, n_cols, eps,
    IS_RMS: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    EMU: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    rmask = rows < n_rows
    cmask = cols < n_cols
    mask = rmask[:, None] & cmask[None, :]
    offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    if IS_RMS:
        xc = x
    else:
        # shifted by the row's first value: a constant row gives xc = 0 exactly (y = bias, as F.layer_norm), and a
        # row with a large mean loses nothing to it (x - x0 is exact for values within a factor 2 of each other).
        # MEAN holds the mean of x - x0; the backward shifts the same way.
        x0 = tl.sum(tl.where(cols[None, :] == 0, x, 0.0), axis=1)
        xs = tl.where(mask, x - x0[:, None], 0.0)
        mean = tl.sum(xs, axis=1) / n_cols
        xc = tl.where(mask, xs - mean[:, None], 0.0)
        tl.store(MEAN + rows, mean, mask=rmask)
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
    y = xc * rstd[:, None] * w[None, :]
    if HAS_BIAS:
        y += tl.load(B + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + offs, cast_to(y, Y.dtype.element_ty, EMU), mask=mask)
    tl.store(RSTD + rows, rstd, mask=rmask)


@triton.jit
def _norm_bwd(
    X, W, DY, DX, MEAN, RSTD, DW_PART, DB_PART, n_rows, n_cols, n_tiles,
    IS_RMS: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    EMU: tl.constexpr,
):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    cmask = cols < n_cols
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK_N,), dtype=tl.float32)
    db = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for tile in range(pid, n_tiles, n_prog):
        rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        rmask = rows < n_rows
        mask = rmask[:, None] & cmask[None, :]
        offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + rows, mask=rmask, other=0.0)
        if IS_RMS:
            xhat = x * rstd[:, None]
        else:
            mean = tl.load(MEAN + rows, mask=rmask, other=0.0)  # of x - x0, as in the forward
            x0 = tl.sum(tl.where(cols[None, :] == 0, x, 0.0), axis=1)
            xhat = tl.where(mask, ((x - x0[:, None]) - mean[:, None]) * rstd[:, None], 0.0)
        wdy = dy * w[None, :]
        c1 = tl.sum(xhat * wdy, axis=1) / n_cols
        if IS_RMS:
            dx = (wdy - xhat * c1[:, None]) * rstd[:, None]
        else:
            c2 = tl.sum(wdy, axis=1) / n_cols
            dx = (wdy - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
        tl.store(DX + offs, cast_to(dx, DX.dtype.element_ty, EMU), mask=mask)
        dw += tl.sum(dy * xhat, axis=0)
        if HAS_BIAS:
            db += tl.sum(dy, axis=0)
    tl.store(DW_PART + pid * n_cols + cols, dw, mask=cmask)
    if HAS_BIAS:
        tl.store(DB_PART + pid * n_cols + cols, db, mask=cmask)


def _forward(x, weight, bias, eps, is_rms):
    op = "rms_norm" if is_rms else "layer_norm"
    check_norm_input(op, x)
    check_float(f"{op} x", x)
    check_norm_params(op, x, weight, bias)
    d = x.shape[-1]
    x2 = as_rows(f"{op} x", x, d)
    n = x2.shape[0]
    y = torch.empty_like(x2)
    rstd = torch.empty(n, dtype=torch.float32, device=x.device)
    mean = rstd if is_rms else torch.empty(n, dtype=torch.float32, device=x.device)
    bm, bn, warps = row_tile(d)
    w = weight.contiguous()
    b = w if bias is None else bias.contiguous()
    if n:
        _norm_fwd[(triton.cdiv(n, bm),)](
            x2, w, b, y, mean, rstd, n, d, float(eps),
            IS_RMS=is_rms, HAS_BIAS=bias is not None, BLOCK_M=bm, BLOCK_N=bn, EMU=emulate_bf16(y),
            num_warps=warps,
        )
    return x2, w, y.view(x.shape), mean, rstd


def _backward(dy, x2, w, mean, rstd, has_bias, is_rms):
    n, d = x2.shape
    dy2 = dy.contiguous().view(n, d)
    dx = torch.empty_like(x2)
    bm, bn, warps = row_tile(d)
    n_tiles = triton.cdiv(n, bm)
    n_prog = reduction_programs(n_tiles, x2.device)
    dw_part = torch.zeros(n_prog, d, dtype=torch.float32, device=x2.device)
    db_part = torch.zeros(n_prog, d, dtype=torch.float32, device=x2.device) if has_bias else dw_part
    if n:
        _norm_bwd[(n_prog,)](
            x2, w, dy2, dx, mean, rstd, dw_part, db_part, n, d, n_tiles,
            IS_RMS=is_rms, HAS_BIAS=has_bias, BLOCK_M=bm, BLOCK_N=bn, EMU=emulate_bf16(dx), num_warps=warps,
        )
    db = db_part.sum(0) if has_bias else None
    return dx, dw_part.sum(0), db


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        x2, w, y, _, rstd = _forward(x, weight, None, eps, True)
        ctx.save_for_backward(x2, w, rstd)
        ctx.x_shape = x.shape
        return y

    @staticmethod
    def backward(ctx, dy):
        x2, w, rstd = ctx.saved_tensors
        dx, dw, _ = _backward(dy, x2, w, rstd, rstd, False, True)
        return dx.view(ctx.x_shape), dw.to(w.dtype), None


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        x2, w, y, mean, rstd = _forward(x, weight, bias, eps, False)
        ctx.save_for_backward(x2, w, mean, rstd)
        ctx.x_shape, ctx.has_bias = x.shape, bias is not None
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        x2, w, mean, rstd = ctx.saved_tensors
        dx, dw, db = _backward(dy, x2, w, mean, rstd, ctx.has_bias, False)
        db = None if db is None else db.to(ctx.bias_dtype)
        return dx.view(ctx.x_shape), dw.to(w.dtype), db, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return RMSNormFunction.apply(x, weight, eps)


def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    return LayerNormFunction.apply(x, weight, bias, eps)
