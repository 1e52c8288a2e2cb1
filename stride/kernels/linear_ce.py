"""Linear layer + cross-entropy that never materialises the full [rows, classes] logits.

Why: a classification head with many classes spends most of its memory on logits (and their grad)
in fp32. Rows are processed in chunks: each chunk's logits are computed, turned into their gradient
in place (by a Triton kernel, or the torch fallback below), and immediately folded into grad_x and
grad_weight with two matmuls. Peak extra memory is one chunk of logits instead of all of them; the
gradients are computed during the forward and the backward only scales them by the upstream grad.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

import torch

ChunkCE = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int, bool], torch.Tensor]

CHUNK_ELEMENTS = 1 << 24  # 16M logits (64 MiB in fp32) per chunk by default


def default_chunk_rows(n: int, v: int, d: int) -> int:
    """Rows a chunk holds: 16M logits, but never fewer than D / 4 rows.

    Every chunk adds its part of the weight gradient, the whole [V, D] of it, so the chunk count
    multiplies that traffic. At V = 128256 and D = 4096, 16M logits are 130 rows: 32 chunks, each writing
    the 2 GB fp32 gradient again. On an H200 the op took 127.7 ms, against 46.0 ms for Liger and 23.3 ms for
    eager (docs/gpu.md). With D / 4 rows a chunk's logits in the input dtype are at most an eighth of the
    fp32 weight gradient that is held anyway, and 4 chunks cover 4096 rows.
    """
    return max(1, min(n, max(CHUNK_ELEMENTS // max(v, 1), d // 4)))


ACC_BLOCKS = 8  # a low-precision chunk's weight-gradient product is made in this many row blocks of [V, D]


def accumulate_product(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """acc += a @ b, acc [V, D] in fp32, without a temporary of acc's size.

    Same dtype: one in-place addmm. Otherwise (bf16 / fp16 inputs) the product is made in ACC_BLOCKS row
    blocks, so the temporary is 1/ACC_BLOCKS of a [V, D] product in the input dtype. Before, a 128k x 4096
    bf16 head held a whole product (1 GB) on top of the 2 GB fp32 gradient (docs/gpu.md, run 2)."""
    if a.dtype == acc.dtype:
        acc.addmm_(a, b)
        return
    step = max(1, -(-acc.shape[0] // ACC_BLOCKS))
    for lo in range(0, acc.shape[0], step):
        acc[lo : lo + step].add_(a[lo : lo + step] @ b)


def torch_chunk_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, n_valid: torch.Tensor, ignore_index: int, write_grad: bool
) -> torch.Tensor:
    """The PyTorch version of the chunk kernel: same contract as triton_cross_entropy.chunk_cross_entropy."""
    lf = logits.float()
    valid = target != ignore_index
    safe = torch.where(valid, target, torch.zeros_like(target))
    lse = torch.logsumexp(lf, dim=-1)
    loss = torch.where(valid, lse - lf.gather(1, safe[:, None]).squeeze(1), torch.zeros_like(lse))
    if write_grad:
        g = torch.exp(lf - lse[:, None])
        g.scatter_add_(1, safe[:, None], -torch.ones_like(lse)[:, None])
        # where, not valid / n_valid: with every target ignored that is 0 / 0, NaN gradients (as the kernel)
        scale = torch.where(valid, 1.0 / n_valid.float(), torch.zeros_like(lse))
        g *= scale[:, None]
        logits.copy_(g)
    return loss


def _check_chunk_rows(chunk_rows: object) -> None:
    """None means the default; anything else must be a positive int (range(0, n, -2) ran no chunk: loss 0)."""
    if chunk_rows is not None and (isinstance(chunk_rows, bool) or not isinstance(chunk_rows, numbers.Integral)
                                   or chunk_rows <= 0):
        raise ValueError(f"linear_cross_entropy: chunk_rows must be a positive integer or None, got {chunk_rows!r}")


def _check_target_range(target: torch.Tensor, v: int, ignore_index: int) -> None:
    """Every target not ignore_index must be a class in [0, V): the kernel would read it out of the row.

    On the host: one reduction on the whole target, the search for the first bad one only on error. On a GPU an
    asynchronous device-side assert instead: a host check waited for every queued kernel at each call (and cannot
    be captured in a CUDA graph); the Triton kernel's mask keeps it inside its row until the assert fires."""
    bad = (target != ignore_index) & ((target < 0) | (target >= v))
    if target.is_cuda:
        torch._assert_async(~bad.any(), "linear_cross_entropy: a target is outside [0, V) and not ignore_index")
        return
    if target.numel() and bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"linear_cross_entropy: target[{i}] = {int(target[i])} is not a class in [0, {v}) "
            f"nor ignore_index ({ignore_index})"
        )


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor) -> None:
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(
            f"linear_cross_entropy: x must be [N, D] and weight [V, D], "
            f"got {tuple(x.shape)} and {tuple(weight.shape)}"
        )
    if weight.shape[0] == 0:  # no classes: the torch path failed in gather, the Triton path returned NaN (audit 19)
        raise ValueError(f"linear_cross_entropy: weight must have at least one class (row), got {tuple(weight.shape)}")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"linear_cross_entropy: bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")
    if target.shape != (x.shape[0],) or target.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"linear_cross_entropy: target must be integer [{x.shape[0]}], "
            f"got {tuple(target.shape)} {target.dtype}"
        )
    if not x.is_floating_point():
        raise TypeError(f"linear_cross_entropy: dtype {x.dtype} is not supported; x and weight must be floating point")
    if x.dtype != weight.dtype:
        raise TypeError(f"linear_cross_entropy: x {x.dtype} and weight {weight.dtype} must share a dtype")


class LinearCrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, target, ignore_index, chunk_rows, chunk_ce, grad_enabled):
        _check(x, weight, bias, target)
        _check_chunk_rows(chunk_rows)
        x = x.contiguous()
        target = target.contiguous().long()
        n, v = x.shape[0], weight.shape[0]
        _check_target_range(target, v, ignore_index)
        # needs_input_grad follows requires_grad, not grad mode (off inside forward): under no_grad (evaluation)
        # it still asked for grad_x, the fp32 [V, D] accumulator and two matmuls a chunk, all thrown away
        need_x, need_w, need_b = (grad_enabled and g for g in ctx.needs_input_grad[:3])
        need_any = need_x or need_w or need_b
        chunk = chunk_rows or default_chunk_rows(n, v, x.shape[1])
        n_valid = (target != ignore_index).sum()
        loss_sum = torch.zeros((), dtype=torch.float32, device=x.device)
        grad_x = torch.empty_like(x) if need_x else None
        one_chunk = chunk >= n  # one product: no fp32 accumulator, the matmul accumulates in fp32 itself
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=x.device) if need_w and not one_chunk \
            else None
        grad_b = torch.zeros(v, dtype=torch.float32, device=x.device) if need_b else None
        for start in range(0, n, chunk):
            xc, tc = x[start : start + chunk], target[start : start + chunk]
            logits = xc @ weight.t()
            if bias is not None:
                logits += bias
            loss_sum += chunk_ce(logits, tc, n_valid, ignore_index, need_any).sum()
            if need_x:
                grad_x[start : start + chunk] = logits @ weight
            if need_w:
                if one_chunk:
                    grad_w = logits.t() @ xc
                else:
                    accumulate_product(grad_w, logits.t(), xc)
            if need_b:
                grad_b += logits.float().sum(0)
        if need_w and grad_w is None:  # no rows: no chunk ran, the gradient of an empty sum is 0
            grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=x.device)
        if grad_w is not None:
            # held until backward in the weight's dtype: half the fp32 accumulator's bytes for bf16 heads
            grad_w = grad_w.to(weight.dtype)
        ctx.save_for_backward(
            *(t if t is not None else torch.empty(0) for t in (grad_x, grad_w, grad_b))
        )
        ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)
        return loss_sum / n_valid

    @staticmethod
    def backward(ctx, grad):
        grad_x, grad_w, grad_b = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        wd, bd = ctx.dtypes
        gx = (grad_x * grad.to(grad_x.dtype)) if need_x else None
        gw = (grad_w * grad).to(wd) if need_w else None  # in wd already: the product stays in wd
        gb = (grad_b * grad).to(bd) if need_b else None
        return gx, gw, gb, None, None, None, None, None


def linear_cross_entropy(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    *,
    ignore_index: int = -100,
    chunk_rows: int | None = None,
    chunk_ce: ChunkCE = torch_chunk_cross_entropy,
) -> torch.Tensor:
    """Mean cross-entropy of x @ weight.T + bias against target over non-ignored rows, as F.cross_entropy.

    As F.cross_entropy: every target ignored (or no rows) gives a NaN loss (0 / 0) and zero gradients. A target
    outside [0, V) that is not ignore_index is a ValueError. Under torch.no_grad only the loss is computed."""
    return LinearCrossEntropyFunction.apply(
        x, weight, bias, target, ignore_index, chunk_rows, chunk_ce, torch.is_grad_enabled()
    )
