"""The 8-bit codes of AdamW8bit's state (format 2), on [blocks, 256] views, in torch.

Measured (docs/kernels.md, "Where the drift came from"): with format 1 (e4m3 codes for m and sqrt(v),
one absmax scale per 256) the parameters drifted 5.7% from fp32 AdamW on the benchmark's gradients;
the second moment caused most of it (4.9% with m kept in fp32), and e4m3's 3 mantissa bits were the
limit, not the block size (2.4% with 32-value blocks for m) nor the rounding mode (stochastic rounding
was worse). Two codes replace e4m3:

* **sqrt(v): a log-like grid fitted to each block.** Each block stores its smallest positive and its
  largest sqrt(v) as bf16 (rounded outward); code 0 is 0 and codes 1..255 are spaced uniformly between the *bit
  patterns* of those fp32 values. Equal steps in the bit pattern are (to within a factor 2) equal
  relative steps, so this is a logarithmic grid whose resolution adapts to the block: ~0.2% when the
  block's values lie within a factor 2 (common for sqrt(v)), ~3.5% over 13 binades, and no value flushes
  to zero, which would divide by eps. Encoding and decoding are integer and fp32 operations without
  transcendental functions: exactly reproducible in the Triton kernel.
* **m: stored as the normalised update u = m / (sqrt(v_hat) + eps)**, int8 linear codes with one
  absmax scale per block; the next step rebuilds m = u * (sqrt(v_hat) + eps) from the decoded sqrt(v).
  u is scale-free (|u| <= ~1.2 for betas (0.9, 0.95); bounded only for beta1^2 < beta2, which AdamW8bit
  requires), so blocks whose gradients span decades need no
  wide code, and the code's error lands on the update in proportion to the block's largest update,
  which is what moves the parameters. The quantity stored is the step's own update (times the bias
  correction 1 - beta1^t, folded into the scale), so encoding costs no extra division.

Both moments take 256 codes + 4 bytes per block: 2.03125 bytes of state per parameter, as format 1.
"""

from __future__ import annotations

import torch

STATE_FORMAT = 2  # the codes below; format 1 (e4m3) is read and converted by adamw8bit_format1.py
BLOCK = 256
# a quantised parameter's state in format 2 (beside "step")
Q_KEYS = ("exp_avg_normed_codes", "exp_avg_normed_scale", "exp_avg_sqrt_grid_codes", "exp_avg_sqrt_grid_bounds")
U_LEVELS = 127.0  # int8 codes -127..127 for u
R_STEPS = 254.0  # uint8 codes: 0 is zero, 1..255 span [lo, hi] of sqrt(v)
MASK31 = 0x7FFFFFFF
ZERO_FLAG = 1 << 15  # sign bit of the bf16 lo bound: the block holds exact zeros (code 0)


class Scratch:
    """Reused [rows, 256] buffers for the torch path's temporaries.

    Why: on the CPU, fresh multi-MB temporaries are page-faulted in on every step (glibc maps and
    trims them: measured 40k-57k minor faults per step on 8.4M parameters, about half the step time).
    The torch path works through large tensors in chunks of CHUNK_BLOCKS blocks using these few
    buffers (4 x 2 MiB by default), which also keeps each chunk's ~25 passes in cache."""

    def __init__(self) -> None:
        self._bufs: dict[tuple[str, torch.dtype, torch.device], torch.Tensor] = {}
        self._views: dict[tuple[str, torch.dtype, torch.device, int], torch.Tensor] = {}

    def get(self, name: str, rows: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        view = self._views.get((name, dtype, device, rows))
        if view is not None:
            return view
        key = (name, dtype, device)
        buf = self._bufs.get(key)
        if buf is None or buf.numel() < rows * BLOCK:
            buf = self._bufs[key] = torch.empty(rows * BLOCK, dtype=dtype, device=device)
            self._views = {k: v for k, v in self._views.items() if k[:3] != key}  # views of the old buffer
        view = self._views[(name, dtype, device, rows)] = buf[: rows * BLOCK].view(rows, BLOCK)
        return view


def _buf(scratch: Scratch | None, name: str, like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if scratch is None:
        return torch.empty(like.shape, dtype=dtype, device=like.device)
    return scratch.get(name, like.shape[0], dtype, like.device)


def grid(bounds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per block, from its bf16 bounds [B, 2]: base (int32), step (fp32) and the zero flag (bool).

    step = max((hi_bits - lo_bits) / 254, 1) in units of the fp32 bit pattern; base = lo_bits -
    trunc(step), so that code c >= 1 decodes to the bits base + trunc(c * step) (code 1 is lo).
    (bf16 -> fp32 is exact: the fp32 bits are the bf16 bits << 16; abs clears the flag.)"""
    f = bounds.to(torch.float32)
    flag = torch.signbit(f[:, 0])
    bits = f.abs_().view(torch.int32)
    step = (bits[:, 1] - bits[:, 0]).to(torch.float32).div_(R_STEPS).clamp_min_(1.0)  # differences are exact
    return bits[:, 0] - step.to(torch.int32), step, flag


def decode_sqrt_v(codes: torch.Tensor, bounds: torch.Tensor, scratch: Scratch | None = None) -> torch.Tensor:
    """uint8 codes [B, 256] and bf16 bounds [B, 2] -> sqrt(v) fp32 [B, 256] (scratch "r" if given):
    code 0 is exactly 0, code c >= 1 is float_from_bits(base + trunc(c * step)). Only blocks flagged as
    holding zeros need the zero test (the encoder never gives code 0 to a positive value)."""
    base, step, flag = grid(bounds)
    t = _buf(scratch, "f_a", codes, torch.float32)
    bits = _buf(scratch, "r", codes, torch.int32)
    t.copy_(codes).mul_(step[:, None])
    bits.copy_(t).add_(base[:, None])  # the conversion truncates
    if bool(flag.any()):
        rows = flag.nonzero().squeeze(1)
        part = bits.index_select(0, rows).masked_fill_(codes.index_select(0, rows) == 0, 0)
        bits.index_copy_(0, rows, part)
    return bits.view(torch.float32)


def encode_sqrt_v(r: torch.Tensor, codes: torch.Tensor, bounds: torch.Tensor, scratch: Scratch | None = None) -> None:
    """sqrt(v) >= 0 fp32 [B, 256] -> codes (uint8) and bounds (bf16 [B, 2]), written in place.

    lo = the smallest positive value rounded down to bf16 (zeros do not widen the grid: they get code
    0 and flag the block), hi = the largest rounded up; code = trunc((bits - base + trunc(step / 2)) /
    step), the nearest grid point (ties up). Every positive value gets a code >= 1: none flushes to 0,
    which would make its denominator eps. (amax and amin: 4x faster here than one aminmax.)"""
    bits = r.view(torch.int32)
    hi, lo = bits.amax(1), bits.amin(1)
    zero = lo == 0
    rows = zero.nonzero().squeeze(1) if bool(zero.any()) else None
    lo = lo.to(torch.int64)
    if rows is not None:  # the smallest positive value where a block holds zeros (all zeros: 2^31 -> lo = hi = 0)
        lo[rows] = torch.sub(bits.index_select(0, rows), 1).bitwise_and_(MASK31).amin(1).to(torch.int64).add_(1)
    hi16 = hi.to(torch.int64).add_(0xFFFF).bitwise_right_shift_(16)
    lo16 = torch.minimum(lo.bitwise_right_shift_(16), hi16)
    bounds.view(torch.int16).copy_(torch.stack((lo16 - zero * ZERO_FLAG, hi16), 1))  # the flag: lo's sign bit
    step = (hi16 - lo16).bitwise_left_shift_(16).to(torch.float32).div_(R_STEPS).clamp_min_(1.0)  # as grid()
    base = lo16.bitwise_left_shift_(16).sub_(step.to(torch.int64)).to(torch.int32)
    t = torch.sub(bits, base.sub_(step.mul(0.5).to(torch.int32))[:, None], out=_buf(scratch, "i_a", r, torch.int32))
    if rows is not None:  # bits - base + trunc(step / 2); zeros -> 0
        t.index_copy_(0, rows, t.index_select(0, rows).masked_fill_(bits.index_select(0, rows) == 0, 0))
    q = _buf(scratch, "f_a", r, torch.float32).copy_(t).div_(step[:, None])  # in [0, 256)
    codes.copy_(t.copy_(q))  # truncated; through int32: torch's fp32 -> uint8 conversion is 2x slower here


def zero_bounds(blocks: int, device: torch.device | str) -> torch.Tensor:
    """Bounds of all-zero blocks: lo = hi = 0 with the zero flag (lo = -0.0)."""
    b = torch.zeros(blocks, 2, dtype=torch.bfloat16, device=device)
    b[:, 0] = -0.0
    return b


def decode_m(codes: torch.Tensor, scale: torch.Tensor, r: torch.Tensor, prev_bc2_sqrt: float,
             eps: float, scratch: Scratch | None = None) -> torch.Tensor:
    """m = u * (r / prev_bc2_sqrt + eps), computed as float(code) * (r * k + e) with k = scale /
    prev_bc2_sqrt and e = scale * eps per block (separate roundings; addcmul, an fma here, was
    slower with per-block operands): int8 codes [B, 256], fp32 scales [B], the decoded sqrt(v) r
    [B, 256] (not modified). Returns scratch "m" if given."""
    den = torch.mul(r, scale.div(prev_bc2_sqrt)[:, None], out=_buf(scratch, "f_a", r, torch.float32))
    den.add_(scale.mul(eps)[:, None])
    return _buf(scratch, "m", r, torch.float32).copy_(codes).mul_(den)


def encode_update(update: torch.Tensor, bc1: float, codes: torch.Tensor, scale: torch.Tensor,
                  scratch: Scratch | None = None) -> None:
    """Quantise this step's update (m_hat / (sqrt(v_hat) + eps)) as u = update * bc1: int8 codes of
    update / (absmax / 127), rounded half to even; the stored scale is (absmax / 127) * bc1."""
    torch.maximum(update.amin(1).neg_(), update.amax(1), out=scale)
    scale.clamp_min_(1e-30).div_(U_LEVELS)
    codes.copy_(torch.div(update, scale[:, None], out=_buf(scratch, "f_a", update, torch.float32)).round_())
    scale.mul_(bc1)


# --- format 1 (e4m3 m and sqrt(v), one fp32 absmax / 448 scale per block), read for conversion ----------


def zero_q8_state(blocks: int, device: torch.device | str) -> dict[str, torch.Tensor]:
    return {
        "exp_avg_normed_codes": torch.zeros(blocks, BLOCK, dtype=torch.int8, device=device),
        "exp_avg_normed_scale": torch.zeros(blocks, dtype=torch.float32, device=device),
        "exp_avg_sqrt_grid_codes": torch.zeros(blocks, BLOCK, dtype=torch.uint8, device=device),
        "exp_avg_sqrt_grid_bounds": zero_bounds(blocks, device),
    }
