"""One Triton launch that applies the 8-bit AdamW step to many tensors (multi-tensor apply).

Per tensor a small int64 table holds the addresses of the parameter, its gradient, and the codes and
per-block parts of both moments (state format 2, `stride.optim.adamw8bit_codes`); a work table maps
each program to (tensor, first block). A program takes ROWS quantisation blocks of 256 values as one
[ROWS, 256] tile: it decodes sqrt(v) (a per-block logarithmic grid on fp32 bit patterns) and m (int8
codes of the normalised update times sqrt(v_hat) + eps), applies the AdamW update in fp32, writes the
parameter, and re-encodes both moments with each row's own bounds and scale. Moments never exist in
fp32 in memory, so the step moves ~2 x 1 B of state per value each way.

The arithmetic is written to round exactly as stride's torch path does on the CPU, so the two give
identical codes (up to torch's CPU sqrt, see the test): torch's CPU lerp and addcmul are fused
multiply-adds (checked here), so the kernel uses `tl.fma` there; every other x * y + z is rounded
twice in torch, so the launch sets `enable_fp_fusion=False`; divisions and square roots are the IEEE
ones (`div_rn`, `sqrt_rn`, not Triton's approximate defaults); conversions truncate (float -> int) or
round to nearest-even (int -> float) on both sides, and round-half-even of the int8 code is the
2^23 + 2^22 addition trick (torch.round is half-even too).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from stride.kernels.triton_cast import cast_to, emulate_bf16

QBLOCK = 256  # values per quantisation block (stride.optim.adamw8bit_codes.BLOCK)
# Blocks per program: a [8, 256] tile (2048 values) on a GPU; under the interpreter, where each
# program costs numpy calls, 32 rows run 3x faster (measured). The tile size does not change results.
ROWS_GPU, ROWS_INTERPRETER = 8, 32


@triton.jit
def _grid(lo16, hi16):
    """Per row, from the bf16 bounds' bits (int32; lo's sign bit is the zero flag): base (int32) and
    step (fp32), as adamw8bit_codes.grid."""
    lo_bits = (lo16 & 0x7FFF) << 16
    step = tl.maximum(tl.div_rn(((hi16 << 16) - lo_bits).to(tl.float32), 254.0), 1.0)
    return lo_bits - step.to(tl.int32), step


@triton.jit
def _encode_sqrt_v(r, b_ptr, c_ptr, rows, offs, row_ok):
    """adamw8bit_codes.encode_sqrt_v on a [ROWS, 256] tile (r >= 0): bounds, then codes."""
    bits = r.to(tl.int32, bitcast=True)
    hi = tl.max(bits, axis=1).to(tl.int64)
    lo = tl.min((bits - 1) & 0x7FFFFFFF, axis=1).to(tl.int64) + 1  # smallest positive (2^31 if none)
    zero = tl.min(bits, axis=1) == 0
    hi16 = (hi + 0xFFFF) >> 16
    lo16 = tl.minimum(lo >> 16, hi16) - tl.where(zero, 32768, 0)
    tl.store(b_ptr + 2 * rows, lo16.to(tl.int16), mask=row_ok)
    tl.store(b_ptr + 2 * rows + 1, hi16.to(tl.int16), mask=row_ok)
    base, step = _grid(lo16.to(tl.int32), hi16.to(tl.int32))  # from registers: no reload of what was stored
    t = bits - (base - (step * 0.5).to(tl.int32))[:, None]
    t = tl.where(bits == 0, 0, t)
    q = tl.div_rn(t.to(tl.float32), step[:, None])  # in [0, 256)
    tl.store(c_ptr + offs, q.to(tl.int32).to(tl.uint8), mask=row_ok[:, None])


@triton.jit
def _adamw8bit_multi_kernel(
    ADDR, WORK, decay, w1, one_minus_w1, c2, beta2, bc1, a, b, prev_bc2_sqrt, eps, neg_lr,
    P_TY: tl.constexpr, G_TY: tl.constexpr, ROWS: tl.constexpr, EMU: tl.constexpr,
):
    pid = tl.program_id(0)
    ti = tl.load(WORK + 2 * pid)
    first = tl.load(WORK + 2 * pid + 1)
    p_ptr = tl.load(ADDR + 7 * ti).to(tl.pointer_type(P_TY))
    g_ptr = tl.load(ADDR + 7 * ti + 1).to(tl.pointer_type(G_TY))
    uc_ptr = tl.load(ADDR + 7 * ti + 2).to(tl.pointer_type(tl.int8))
    us_ptr = tl.load(ADDR + 7 * ti + 3).to(tl.pointer_type(tl.float32))
    rc_ptr = tl.load(ADDR + 7 * ti + 4).to(tl.pointer_type(tl.uint8))
    rb_ptr = tl.load(ADDR + 7 * ti + 5).to(tl.pointer_type(tl.int16))
    n = tl.load(ADDR + 7 * ti + 6)
    n_blocks = (n + 255) // 256
    rows = first + tl.arange(0, ROWS)
    cols = tl.arange(0, 256)
    row_ok = rows < n_blocks
    offs = rows[:, None] * 256 + cols[None, :]
    val_ok = offs < n  # the last block's padding: g = 0, its moments stay 0
    g = tl.load(g_ptr + offs, mask=val_ok, other=0.0).to(tl.float32)
    # sqrt(v): code 0 is 0, code c >= 1 is the fp32 with bits base + trunc(c * step)
    base, step = _grid(tl.load(rb_ptr + 2 * rows, mask=row_ok, other=0).to(tl.int32),
                       tl.load(rb_ptr + 2 * rows + 1, mask=row_ok, other=0).to(tl.int32))
    rc = tl.load(rc_ptr + offs, mask=row_ok[:, None], other=0)
    bits = (rc.to(tl.float32) * step[:, None]).to(tl.int32) + base[:, None]
    r = tl.where(rc == 0, 0.0, bits.to(tl.float32, bitcast=True))
    # m = float(code) * (r * (scale / prev_bc2_sqrt) + scale * eps)
    us = tl.load(us_ptr + rows, mask=row_ok, other=0.0)
    den = r * tl.div_rn(us, prev_bc2_sqrt)[:, None] + (us * eps)[:, None]
    m = tl.load(uc_ptr + offs, mask=row_ok[:, None], other=0).to(tl.float32) * den
    v = r * r
    # m.lerp_(g, w1): torch's CPU lerp is fma(w, g - m, m) for w < 0.5, else fma(-(g - m), 1 - w, g)
    d = g - m
    m = tl.where(w1 < 0.5, tl.fma(w1, d, m), tl.fma(-d, one_minus_w1, g))
    # v.mul_(beta2).addcmul_(g, g, value=c2): fma(c2 * g, g, v * beta2)
    v = tl.fma(c2 * g, g, v * beta2)
    r = tl.sqrt_rn(v)
    _encode_sqrt_v(r, rb_ptr, rc_ptr, rows, offs, row_ok)
    update = tl.div_rn(m, r * a + b)  # (m / bc1) / (r / bc2_sqrt + eps) with a = bc1 / bc2_sqrt, b = bc1 * eps
    p = tl.load(p_ptr + offs, mask=val_ok, other=0.0).to(tl.float32)
    p = tl.fma(neg_lr, update, p * decay)  # p.mul_(decay).add_(update, alpha=-lr)
    tl.store(p_ptr + offs, cast_to(p, P_TY, EMU), mask=val_ok)
    # u = update * bc1: int8 codes of update / (absmax / 127), round half to even (|q| <= 127 < 2^22)
    s = tl.div_rn(tl.maximum(tl.maximum(-tl.min(update, axis=1), tl.max(update, axis=1)), 1e-30), 127.0)
    q = tl.div_rn(update, s[:, None])
    q = (q + 12582912.0) - 12582912.0
    tl.store(uc_ptr + offs, q.to(tl.int8), mask=row_ok[:, None])
    tl.store(us_ptr + rows, s * bc1, mask=row_ok)


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


def check_q8_buffers(i: int, p: torch.Tensor, g: torch.Tensor, s: dict[str, torch.Tensor], p_ty: torch.dtype,
                     g_ty: torch.dtype) -> None:
    """The kernel reads and writes through raw pointers: codes for ceil(numel / 256) blocks in format 2's dtypes,
    one param and grad dtype per launch. A mismatch is a write past the end of a buffer (heap corruption: 8-bit state
    of a smaller parameter loaded, outside audit), never a result; shapes are metadata, so this costs no sync."""
    blocks = -(-p.numel() // 256)
    want = {"exp_avg_normed_codes": ((blocks, 256), torch.int8), "exp_avg_normed_scale": ((blocks,), torch.float32),
            "exp_avg_sqrt_grid_codes": ((blocks, 256), torch.uint8),
            "exp_avg_sqrt_grid_bounds": ((blocks, 2), torch.bfloat16)}
    bad = [f"{k} missing" if k not in s else f"{k} {tuple(s[k].shape)} {s[k].dtype}" for k, (shape, dt) in want.items()
           if k not in s or tuple(s[k].shape) != shape or s[k].dtype != dt or not s[k].is_contiguous()]
    if bad or p.dtype != p_ty or g.dtype != g_ty or g.numel() != p.numel():
        raise ValueError(f"adamw8bit_multi_tensor: tensor {i}: param {p.dtype} {p.numel()}, grad {g.dtype} "
                         f"{g.numel()}; state {', '.join(bad) or 'ok'}: the kernel needs {blocks} contiguous blocks of "
                         "codes (int8, fp32 scales, uint8, bf16 bounds) and one dtype and size per parameter")


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

    `states[i]` holds exp_avg_normed_codes / _scale and exp_avg_sqrt_grid_codes / _bounds (state
    format 2), laid out as stride.optim.adamw8bit.AdamW8bit keeps them; every tensor is at step `step`.
    """
    if not params:
        return
    device = params[0].device
    for i, (p, g, s) in enumerate(zip(params, grads, states, strict=True)):
        check_q8_buffers(i, p, g, s, params[0].dtype, grads[0].dtype)
    addr = [
        [p.data_ptr(), g.data_ptr(), s["exp_avg_normed_codes"].data_ptr(), s["exp_avg_normed_scale"].data_ptr(),
         s["exp_avg_sqrt_grid_codes"].data_ptr(), s["exp_avg_sqrt_grid_bounds"].data_ptr(), p.numel()]
        for p, g, s in zip(params, grads, states, strict=True)
    ]
    addr_t = torch.tensor(addr, dtype=torch.int64).to(device, non_blocking=True)
    rows = ROWS_GPU if device.type == "cuda" else ROWS_INTERPRETER
    work_t = _work_table(tuple(p.numel() for p in params), str(device), rows)
    w1 = f32(1.0 - beta1)
    bc1, bc2_sqrt = 1.0 - beta1**step, (1.0 - beta2**step) ** 0.5
    prev = (1.0 - beta2 ** (step - 1)) ** 0.5 if step > 1 else 1.0
    _adamw8bit_multi_kernel[(work_t.shape[0],)](
        addr_t, work_t, f32(1.0 - lr * weight_decay), w1, f32(1.0 - w1), f32(1.0 - beta2), f32(beta2),
        f32(bc1), f32(bc1 / bc2_sqrt), f32(bc1 * eps), f32(prev), f32(eps), f32(-lr),
        P_TY=_TL[params[0].dtype], G_TY=_TL[grads[0].dtype], ROWS=rows, EMU=emulate_bf16(params[0]), num_warps=4,
        enable_fp_fusion=False,  # separate roundings for x * y + z, as the torch path has them
    )
