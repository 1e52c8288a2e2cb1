"""One Triton launch that applies the AdamW update to many tensors (multi-tensor apply).

A small int64 table holds each tensor's addresses (param, grad, exp_avg, exp_avg_sq) and size; a
second table maps every program to (tensor, block start). Each program loads its tensor's pointers,
updates one block in fp32 and stores it back, so a whole parameter group costs one kernel launch
instead of one (or several, for foreach) per tensor. Imported lazily, at the first Triton step.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from stride.kernels.triton_cast import cast_to, emulate_bf16

BLOCK = 2048


@triton.jit
def _adamw_multi_kernel(
    ADDR, WORK, decay, w1, one_minus_w1, beta2, step_size, bc2_sqrt, eps,
    P_TY: tl.constexpr, G_TY: tl.constexpr, BLOCK: tl.constexpr, EMU: tl.constexpr,
):
    pid = tl.program_id(0)
    ti = tl.load(WORK + 2 * pid)
    start = tl.load(WORK + 2 * pid + 1)
    p_ptr = tl.load(ADDR + 5 * ti).to(tl.pointer_type(P_TY))
    g_ptr = tl.load(ADDR + 5 * ti + 1).to(tl.pointer_type(G_TY))
    m_ptr = tl.load(ADDR + 5 * ti + 2).to(tl.pointer_type(tl.float32))
    v_ptr = tl.load(ADDR + 5 * ti + 3).to(tl.pointer_type(tl.float32))
    n = tl.load(ADDR + 5 * ti + 4)
    offs = start + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(p_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    m = tl.load(m_ptr + offs, mask=mask, other=0.0)
    v = tl.load(v_ptr + offs, mask=mask, other=0.0)
    p = p * decay
    # m.lerp_(g, w1) as torch computes it (CPU and CUDA): fma(w1, g - m, m) for w1 < 0.5, else fma(-(g - m), 1 - w1, g),
    # which is g exactly at beta1 = 0 (m + (g - m) was not: drift 2.05e-4 from float64 at betas (0, 0), torch 8.3e-6)
    d = g - m
    m = tl.where(w1 < 0.5, tl.fma(w1, d, m), tl.fma(-d, one_minus_w1, g))
    v = v * beta2 + (1.0 - beta2) * g * g
    denom = tl.sqrt(v) / bc2_sqrt + eps
    p = p - step_size * (m / denom)
    tl.store(m_ptr + offs, m, mask=mask)
    tl.store(v_ptr + offs, v, mask=mask)
    tl.store(p_ptr + offs, cast_to(p, P_TY, EMU), mask=mask)


@functools.lru_cache(maxsize=64)
def _work_table(numels: tuple[int, ...], device: str) -> torch.Tensor:
    """[(tensor index, block start)] for every block of every tensor; depends only on the sizes, so it
    is built once (vectorised) and reused every step, even when grads are reallocated."""
    n = torch.tensor(numels, dtype=torch.int64)
    blocks = (n + BLOCK - 1) // BLOCK
    tensor_idx = torch.repeat_interleave(torch.arange(len(numels)), blocks)
    first = torch.cumsum(blocks, 0) - blocks
    start = (torch.arange(int(blocks.sum())) - first[tensor_idx]) * BLOCK
    return torch.stack((tensor_idx, start), dim=1).contiguous().to(device)


_TL = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def f32(x: float) -> float:
    """The float32 value of a Python scalar, as torch's kernels take their scalar operands."""
    return float(torch.tensor(x, dtype=torch.float32))


def adamw_multi_tensor(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    step: int,
) -> None:
    """In-place AdamW on same-dtype, same-device, contiguous tensors; moments are fp32."""
    if not params:
        return
    device = params[0].device
    p_ty, g_ty = params[0].dtype, grads[0].dtype
    addr = []
    for i, (p, g, m, v) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs, strict=True)):
        # the kernel reads and writes through raw pointers with these dtypes and p's element count: a mismatch is
        # an out-of-bounds write on the device (audit 8, #2: bf16 moments from a loaded state dict), never a result
        if m.dtype != torch.float32 or v.dtype != torch.float32 or p.dtype != p_ty or g.dtype != g_ty \
                or not (p.numel() == g.numel() == m.numel() == v.numel()):
            raise ValueError(f"adamw_multi_tensor: tensor {i}: param {p.dtype} {p.numel()}, grad {g.dtype} "
                             f"{g.numel()}, exp_avg {m.dtype} {m.numel()}, exp_avg_sq {v.dtype} {v.numel()}; "
                             f"the kernel needs fp32 moments and one dtype and size per parameter")
        addr.append([p.data_ptr(), g.data_ptr(), m.data_ptr(), v.data_ptr(), p.numel()])
    addr_t = torch.tensor(addr, dtype=torch.int64).to(device, non_blocking=True)
    work_t = _work_table(tuple(p.numel() for p in params), str(device))
    bc1 = 1.0 - beta1**step
    w1 = f32(1.0 - beta1)  # torch's lerp weight, in fp32 as its kernel takes it
    bc2 = 1.0 - beta2**step
    _adamw_multi_kernel[(work_t.shape[0],)](
        addr_t, work_t, 1.0 - lr * weight_decay, w1, f32(1.0 - w1), beta2, lr / bc1, bc2**0.5, eps,
        P_TY=_TL[params[0].dtype], G_TY=_TL[grads[0].dtype], BLOCK=BLOCK, EMU=emulate_bf16(params[0]), num_warps=8,
    )
