"""One Triton launch that applies the 8-bit AdamW step to many tensors (multi-tensor apply).

Per tensor a small int64 table holds the addresses of the parameter, its gradient, and the codes and
scales of both moments; a work table maps each program to (tensor, first block). A program takes
ROWS quantisation blocks of 256 values as one [ROWS, 256] tile: it decodes the e4m3 codes, applies
the AdamW update in fp32, writes the parameter, and re-quantises each row with its own absmax scale.
Moments never exist in fp32 in memory, so the step moves ~2 x 1 B of state per value each way.

The arithmetic is written to round exactly as stride's torch path does on the CPU, so the two give
identical codes: torch's CPU lerp and addcmul are fused multiply-adds (checked here), so the kernel
uses `tl.fma`; divisions and square roots are the IEEE ones (`div_rn`, `sqrt_rn`, not Triton's
approximate defaults). The e4m3 conversions are done with integer operations on the bits, in both
directions, because Triton's interpreter flushes e4m3 subnormals (seen with Triton 3.9) and GPUs
before sm_89 have no native e4m3; the encoder rounds to nearest-even and saturates at 448 as torch's
`.to(torch.float8_e4m3fn)` does.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from stride.kernels.triton_cast import cast_to, emulate_bf16

QBLOCK = 256  # values per quantisation block (stride.optim.adamw8bit.BLOCK)
# Blocks per program: a [8, 256] tile (2048 values) on a GPU; under the interpreter, where each
# program costs numpy calls, 32 rows run 3x faster (measured). The tile size does not change results.
ROWS_GPU, ROWS_INTERPRETER = 8, 32


@triton.jit
def _e4m3_decode(c):
    """uint8 e4m3fn codes -> fp32 values (exact): normals by bit placement, subnormals as m * 2^-9.
    NaN codes decode to +-480, as in stride.optim.adamw8bit.dequantize (the block's scale is NaN/inf)."""
    c = c.to(tl.uint32)
    sign = (c & 0x80) << 24
    e = (c >> 3) & 0xF
    m = c & 0x7
    normal = ((e + 120) << 23) | (m << 20)
    val = tl.where(e > 0, normal.to(tl.float32, bitcast=True), m.to(tl.float32) * 0.001953125)
    return (val.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def _e4m3_encode(x):
    """fp32 -> uint8 e4m3fn codes, round to nearest-even, saturating at +-448, NaN -> 0x7F."""
    bits = x.to(tl.uint32, bitcast=True)
    sign = (bits >> 24) & 0x80
    a = bits & 0x7FFFFFFF
    # normals (|x| >= 2^-6): drop 20 mantissa bits with round-half-even, rebias the exponent 127 -> 7
    aa = tl.where(a >= (121 << 23), a, 121 << 23)
    nrm = (aa - (120 << 23) + 0x7FFFF + ((aa >> 20) & 1)) >> 20
    nrm = tl.minimum(nrm, 0x7E)
    # subnormals: adding 2^14 leaves 2^-9 as the fp32 ulp, so the fp32 add rounds to the e4m3 grid
    big = (a.to(tl.float32, bitcast=True) + 16384.0).to(tl.uint32, bitcast=True)
    sub = big - (141 << 23)
    code = tl.where(a >= (121 << 23), nrm, sub)
    code = tl.where(a > 0x7F800000, 0x7F, code)
    return (code | sign).to(tl.uint8)


@triton.jit
def _requantize(x, codes_ptr, scale_ptr, rows, cols, row_ok):
    """Per row: scale = max(absmax, 1e-30) / 448, codes = e4m3(x / scale); both stored."""
    scale = tl.div_rn(tl.maximum(tl.max(tl.abs(x), axis=1), 1e-30), 448.0)
    q = _e4m3_encode(tl.div_rn(x, scale[:, None]))
    tl.store(codes_ptr + rows[:, None] * 256 + cols[None, :], q, mask=row_ok[:, None])
    tl.store(scale_ptr + rows, scale, mask=row_ok)


@triton.jit
def _adamw8bit_multi_kernel(
    ADDR, WORK, decay, w1, one_minus_w1, c2, beta2, bc1, bc2_sqrt, eps, neg_lr,
    P_TY: tl.constexpr, G_TY: tl.constexpr, ROWS: tl.constexpr, EMU: tl.constexpr,
):
    pid = tl.program_id(0)
    ti = tl.load(WORK + 2 * pid)
    first = tl.load(WORK + 2 * pid + 1)
    p_ptr = tl.load(ADDR + 7 * ti).to(tl.pointer_type(P_TY))
    g_ptr = tl.load(ADDR + 7 * ti + 1).to(tl.pointer_type(G_TY))
    mc_ptr = tl.load(ADDR + 7 * ti + 2).to(tl.pointer_type(tl.uint8))
    ms_ptr = tl.load(ADDR + 7 * ti + 3).to(tl.pointer_type(tl.float32))
    vc_ptr = tl.load(ADDR + 7 * ti + 4).to(tl.pointer_type(tl.uint8))
    vs_ptr = tl.load(ADDR + 7 * ti + 5).to(tl.pointer_type(tl.float32))
    n = tl.load(ADDR + 7 * ti + 6)
    n_blocks = (n + 255) // 256
    rows = first + tl.arange(0, ROWS)
    cols = tl.arange(0, 256)
    row_ok = rows < n_blocks
    offs = rows[:, None] * 256 + cols[None, :]
    val_ok = offs < n  # the last block's padding: g = 0, codes stay 0
    g = tl.load(g_ptr + offs, mask=val_ok, other=0.0).to(tl.float32)
    m = _e4m3_decode(tl.load(mc_ptr + offs, mask=row_ok[:, None], other=0)) * tl.load(
        ms_ptr + rows, mask=row_ok, other=0.0)[:, None]
    r = _e4m3_decode(tl.load(vc_ptr + offs, mask=row_ok[:, None], other=0)) * tl.load(
        vs_ptr + rows, mask=row_ok, other=0.0)[:, None]
    v = r * r
    # m.lerp_(g, w1): torch's CPU lerp is fma(w, g - m, m) for w < 0.5, else fma(-(g - m), 1 - w, g)
    d = g - m
    m = tl.where(w1 < 0.5, tl.fma(w1, d, m), tl.fma(-d, one_minus_w1, g))
    # v.mul_(beta2).addcmul_(g, g, value=c2): fma(c2 * g, g, v * beta2)
    v = tl.fma(c2 * g, g, v * beta2)
    r = tl.sqrt_rn(v)
    update = tl.div_rn(tl.div_rn(m, bc1), tl.div_rn(r, bc2_sqrt) + eps)
    p = tl.load(p_ptr + offs, mask=val_ok, other=0.0).to(tl.float32)
    p = tl.fma(neg_lr, update, p * decay)  # p.mul_(decay).add_(update, alpha=-lr)
    tl.store(p_ptr + offs, cast_to(p, P_TY, EMU), mask=val_ok)
    _requantize(m, mc_ptr, ms_ptr, rows, cols, row_ok)
    _requantize(r, vc_ptr, vs_ptr, rows, cols, row_ok)


@functools.lru_cache(maxsize=64)
def _work_table(numels: tuple[int, ...], device: str, rows: int) -> torch.Tensor:
    """[(tensor index, first block)] for every program; depends only on the sizes, so it is cached."""
    n = torch.tensor(numels, dtype=torch.int64)
    blocks = (n + QBLOCK - 1) // QBLOCK
    progs = (blocks + rows - 1) // rows
    tensor_idx = torch.repeat_interleave(torch.arange(len(numels)), progs)
    first = torch.cumsum(progs, 0) - progs
    start = (torch.arange(int(progs.sum())) - first[tensor_idx]) * rows
    return torch.stack((tensor_idx, start), dim=1).contiguous().to(device)


_TL = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def f32(x: float) -> float:
    """The float32 value torch would use for a Python scalar operand (kernel scalars are fp32)."""
    return float(torch.tensor(x, dtype=torch.float32))


def adamw8bit_multi_tensor(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    states: list[dict[str, torch.Tensor]],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    step: int,
) -> None:
    """In-place 8-bit AdamW on contiguous same-dtype tensors whose moments are block-quantised.

    `states[i]` holds exp_avg_codes / exp_avg_scale / exp_avg_sqrt_codes / exp_avg_sqrt_scale, laid
    out as stride.optim.adamw8bit.AdamW8bit keeps them; every tensor is at optimizer step `step`.
    """
    if not params:
        return
    device = params[0].device
    addr = [
        [p.data_ptr(), g.data_ptr(), s["exp_avg_codes"].data_ptr(), s["exp_avg_scale"].data_ptr(),
         s["exp_avg_sqrt_codes"].data_ptr(), s["exp_avg_sqrt_scale"].data_ptr(), p.numel()]
        for p, g, s in zip(params, grads, states, strict=True)
    ]
    addr_t = torch.tensor(addr, dtype=torch.int64).to(device, non_blocking=True)
    rows = ROWS_GPU if device.type == "cuda" else ROWS_INTERPRETER
    work_t = _work_table(tuple(p.numel() for p in params), str(device), rows)
    w1 = f32(1.0 - beta1)
    _adamw8bit_multi_kernel[(work_t.shape[0],)](
        addr_t, work_t, f32(1.0 - lr * weight_decay), w1, f32(1.0 - w1), f32(1.0 - beta2), f32(beta2),
        f32(1.0 - beta1**step), f32((1.0 - beta2**step) ** 0.5), f32(eps), f32(-lr),
        P_TY=_TL[params[0].dtype], G_TY=_TL[grads[0].dtype], ROWS=rows, EMU=emulate_bf16(params[0]), num_warps=4,
    )
