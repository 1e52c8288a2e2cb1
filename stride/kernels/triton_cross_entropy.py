"""Row-wise cross-entropy over a chunk of logits in Triton, writing the logits' gradient in place.

Used by the chunked linear + cross-entropy: for each row the kernel makes one online pass for the
max and log-sum-exp and a second pass that overwrites the logits with (softmax - onehot) / n_valid,
so a chunk's logits buffer is reused as its gradient and no second buffer is allocated.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from stride.kernels.runtime import next_pow2
from stride.kernels.triton_cast import cast_to, emulate_bf16


@triton.jit
def _ce_rows_kernel(
    LOGITS, TARGET, LOSS, N_VALID, n_cols, ignore_index,
    WRITE_GRAD: tl.constexpr, BLOCK_V: tl.constexpr, EMU: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    base = LOGITS + row * n_cols
    tgt = tl.load(TARGET + row)
    valid = tgt != ignore_index
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.full((), 0.0, tl.float32)
    for start in range(0, n_cols, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        z = tl.load(base + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(z, axis=0))
        # while every logit so far is -inf (a masked leading block of classes, e.g. a -inf bias), shift by 0, not by
        # m_new: exp(-inf - -inf) is NaN, and that NaN made the whole row's loss and gradient NaN (audit 19)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(z - shift), axis=0)
        m = m_new
    lse = m + tl.log(s)
    # the caller refuses targets outside [0, n_cols) (linear_ce._check_target_range); the mask keeps the kernel
    # inside its row even so (an out-of-range target read another row's logit, or memory past the buffer)
    in_row = valid & (tgt >= 0) & (tgt < n_cols)
    safe_tgt = tl.where(in_row, tgt, 0)
    z_t = tl.load(base + safe_tgt, mask=in_row, other=0.0).to(tl.float32)
    loss = tl.where(valid, lse - z_t, 0.0)
    tl.store(LOSS + row, loss)
    if WRITE_GRAD:
        scale = tl.where(valid, 1.0 / tl.load(N_VALID).to(tl.float32), 0.0)
        for start in range(0, n_cols, BLOCK_V):
            cols = start + tl.arange(0, BLOCK_V)
            cmask = cols < n_cols
            z = tl.load(base + cols, mask=cmask, other=0.0).to(tl.float32)
            g = tl.exp(z - lse) - tl.where(cols == tgt, 1.0, 0.0)
            tl.store(base + cols, cast_to(g * scale, LOGITS.dtype.element_ty, EMU), mask=cmask)


def chunk_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, n_valid: torch.Tensor, ignore_index: int, write_grad: bool
) -> torch.Tensor:
    """Per-row losses (0 for ignored rows); with write_grad, logits now hold d mean-loss / d logits."""
    n, v = logits.shape
    loss = torch.empty(n, dtype=torch.float32, device=logits.device)
    block_v = min(next_pow2(v), 8192 if logits.is_cuda else 1024)
    if n:
        _ce_rows_kernel[(n,)](
            logits, target, loss, n_valid, v, ignore_index,
            WRITE_GRAD=write_grad, BLOCK_V=block_v, EMU=emulate_bf16(logits), num_warps=8 if block_v >= 4096 else 4,
        )
    return loss
