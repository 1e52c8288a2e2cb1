"""Chunked linear + cross-entropy against float64 F.cross_entropy(F.linear(...)), torch and Triton chunks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stride.kernels import get_ops
from stride.kernels.linear_ce import linear_cross_entropy, torch_chunk_cross_entropy

DEV = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}


def rel(got: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    """||got - ref|| over ||scale|| (default: ||ref||)."""
    size = (ref if scale is None else scale).norm().clamp_min(1e-30)
    return ((got.double() - ref).norm() / size).item()


def term_scales(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, t: torch.Tensor, g: float):
    """Float64 sizes of what the loss and each gradient are made of: the denominators of their errors. A low-precision
    kernel rounds the logits z (error <= u |z|, u the dtype's unit roundoff), which moves each softmax probability p_i
    by at most p_i 2u max|z|, and rounds dz = g (p - onehot) / n to the dtype; so |error of dz_i| <= u (g / n)
    (p_i + onehot_i)(1 + 2 max|z|), a bound that does not shrink where p_t - 1 cancels, as |dz| does. The gradients
    are sums of dz times x or W (a dot product's error is bounded by its |terms|), the loss is lse - z_t (bounded by
    |lse| + |z_t|). Seed 37 (bf16, one row, V 5) read errors of 1.4e-2 of the loss and 1.0e-2 of grad_b measured
    against themselves, more than the dtype's 1e-2: the kernel was right, the sums cancelled."""
    valid = t != -100
    n = int(valid.sum())
    tt = t.clamp_min(0)
    z = x @ w.t() + (b if b is not None else 0.0)
    amp = 1 + 2 * z.abs().amax(-1, keepdim=True)
    dz = (torch.softmax(z, -1) + F.one_hot(tt, z.shape[-1]).to(z.dtype)) * amp * (g / n) * valid[:, None]
    zt = z.gather(-1, tt[:, None]).squeeze(-1)
    loss = ((torch.logsumexp(z, -1).abs() + zt.abs()) * valid).sum() / n
    return [loss, dz @ w.abs(), dz.t() @ x.abs()] + ([dz.sum(0)] if b is not None else [])


@pytest.mark.parametrize("impl", ["torch", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n,d,v,chunk,bias", [(1, 8, 5, None, True), (37, 24, 1500, 8, False), (20, 16, 77, 6, True)])
def test_linear_cross_entropy(impl, dtype, n, d, v, chunk, bias, seed):
    ops = get_ops(impl)
    x = torch.randn(n, d, device=DEV).to(dtype).requires_grad_()
    w = (torch.randn(v, d, device=DEV) / d**0.5).to(dtype).requires_grad_()
    b = (0.1 * torch.randn(v, device=DEV)).to(dtype).requires_grad_() if bias else None
    t = torch.randint(0, v, (n,), device=DEV)
    if n > 2:
        t[::3] = -100  # ignored rows
    leaves = [x, w] + ([b] if bias else [])
    loss = ops.linear_cross_entropy(x, w, b, t, chunk_rows=chunk)
    grads = torch.autograd.grad(2.5 * loss, leaves)
    r64 = [a.detach().double().requires_grad_() for a in leaves]
    ref = F.cross_entropy(F.linear(r64[0], r64[1], r64[2] if bias else None), t, ignore_index=-100)
    ref_grads = torch.autograd.grad(2.5 * ref, r64)
    with torch.no_grad():
        scales = term_scales(*(r.detach() for r in r64[:2]), r64[2].detach() if bias else None, t, 2.5)
    errs = [rel(loss, ref, scales[0])] + [rel(g, rg, sc) for g, rg, sc in zip(grads, ref_grads, scales[1:],
                                                                                  strict=True)]
    assert loss.dtype == torch.float32 and all(g.dtype == dtype for g in grads)
    assert max(errs) < TOL[dtype], f"seed={seed} errors(loss, dx, dw, db)={errs}"


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_linear_cross_entropy_3d_input_and_only_weight_grad(impl, seed):
    ops = get_ops(impl)
    x = torch.randn(2, 5, 12, device=DEV)  # no grad: a frozen trunk, only the head trains
    w = torch.randn(40, 12, device=DEV, requires_grad=True)
    t = torch.randint(0, 40, (2, 5), device=DEV)
    loss = ops.linear_cross_entropy(x, w, None, t, chunk_rows=3)
    (gw,) = torch.autograd.grad(loss, w)
    w64 = w.detach().double().requires_grad_()
    ref = F.cross_entropy(x.double().reshape(-1, 12) @ w64.t(), t.reshape(-1))
    (gw64,) = torch.autograd.grad(ref, w64)
    assert rel(loss, ref) < 1e-6 and rel(gw, gw64) < 1e-6, f"seed={seed}"


def test_chunks_never_hold_more_than_chunk_rows_of_logits():
    """The whole point: the largest logits buffer ever built is chunk_rows x V, not N x V."""
    seen: list[tuple[int, int]] = []

    def spy(logits, target, n_valid, ignore_index, write_grad):
        seen.append(tuple(logits.shape))
        return torch_chunk_cross_entropy(logits, target, n_valid, ignore_index, write_grad)

    x = torch.randn(50, 8, requires_grad=True)
    w = torch.randn(300, 8, requires_grad=True)
    t = torch.randint(0, 300, (50,))
    loss = linear_cross_entropy(x, w, None, t, chunk_rows=16, chunk_ce=spy)
    loss.backward()
    assert seen == [(16, 300), (16, 300), (16, 300), (2, 300)]
    ref = F.cross_entropy(x.detach() @ w.detach().t(), t)
    assert abs(loss.item() - ref.item()) < 1e-5


def test_default_chunk_holds_16m_logits_but_at_least_a_quarter_of_d_rows():
    """Few chunks at a large vocabulary: each chunk rewrites the whole fp32 weight gradient (docs/gpu.md)."""
    from stride.kernels.linear_ce import default_chunk_rows

    assert default_chunk_rows(8192, 32000, 2048) == (1 << 24) // 32000  # 524 rows: the 16M-logit rule
    assert default_chunk_rows(4096, 128256, 4096) == 1024  # not 130: 4 chunks instead of 32
    assert default_chunk_rows(100, 128256, 4096) == 100 and default_chunk_rows(5, 10, 2) == 5
    seen: list[int] = []

    def spy(logits, target, n_valid, ignore_index, write_grad):
        seen.append(logits.shape[0])
        return torch_chunk_cross_entropy(logits, target, n_valid, ignore_index, write_grad)

    x = torch.randn(40, 64, dtype=torch.float64, requires_grad=True)
    w = torch.randn(30, 64, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 30, (40,))
    loss = linear_cross_entropy(x, w, None, t, chunk_ce=spy)  # the default chunk: 40 rows in one
    (gw,) = torch.autograd.grad(loss, w)
    ref = F.cross_entropy(x @ w.t(), t)
    (gw64,) = torch.autograd.grad(ref, w)
    assert seen == [40] and rel(loss, ref) < 1e-6 and rel(gw, gw64) < 1e-6  # the loss and grad_w sum in fp32


def test_all_ignored_gives_nan_like_torch():
    x, w = torch.randn(4, 3), torch.randn(6, 3)
    t = torch.full((4,), -100)
    assert torch.isnan(get_ops("torch").linear_cross_entropy(x, w, None, t))
    assert torch.isnan(F.cross_entropy(x @ w.t(), t))


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_under_no_grad_only_the_loss_is_computed(impl) -> None:
    """Evaluation with a weight that requires grad: the same loss, no gradient written into the chunks and no fp32
    [V, D] accumulator or grad_x (they were built and thrown away: 2 GiB at 128k x 4096)."""
    from stride.kernels import ops as ops_module

    seen: list[bool] = []
    chunk_ce = ops_module._triton_chunk_ce if impl == "triton" else torch_chunk_cross_entropy

    def spy(logits, target, n_valid, ignore_index, write_grad):
        seen.append(write_grad)
        return chunk_ce(logits, target, n_valid, ignore_index, write_grad)

    v, d, n = 512, 64, 32
    x = torch.randn(n, d, requires_grad=True)
    w = torch.randn(v, d, requires_grad=True)
    t = torch.randint(0, v, (n,))
    with_grad = linear_cross_entropy(x, w, None, t, chunk_rows=8, chunk_ce=spy)
    assert seen == [True] * 4
    seen.clear()
    live = _LiveBytes()
    live.live.update(a.untyped_storage().data_ptr() for a in (x, w, t))  # views of the inputs (w.t()) are not new
    with torch.no_grad(), live.mode:
        loss = linear_cross_entropy(x, w, None, t, chunk_rows=8, chunk_ce=spy)
    assert seen == [False] * 4 and loss.grad_fn is None
    assert torch.equal(loss, with_grad.detach())
    # two chunks of logits at most (16 KiB each, the next made before the last is freed); was > 128 KiB (W fp32)
    assert live.peak < w.numel() * w.element_size() / 2, live.peak


def test_linear_cross_entropy_rejects_bad_shapes():
    ops = get_ops("torch")
    with pytest.raises(ValueError, match="weight \\[V, D\\]"):
        ops.linear_cross_entropy(torch.randn(4, 3), torch.randn(6, 5), None, torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="target shape"):
        ops.linear_cross_entropy(torch.randn(4, 3), torch.randn(6, 3), None, torch.zeros(5, dtype=torch.long))


class _LiveBytes:
    """Peak bytes of the tensors an op creates, alive at once: a dispatch mode counts each new storage when
    it is made and a finalizer on its tensor uncounts it (views of a counted storage are not counted)."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
                out = func(*args, **(kwargs or {}))
                for t in tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
                        outer.count(t)
                return out

        self.mode, self.now, self.peak, self.live = Mode(), 0, 0, set()

    def count(self, t: torch.Tensor) -> None:
        import weakref

        key, n = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
        if key in self.live:
            return
        self.live.add(key)
        self.now += n
        self.peak = max(self.peak, self.now)

        def gone(key: int = key, n: int = n) -> None:
            self.now -= n
            self.live.discard(key)

        weakref.finalize(t, gone)


def test_a_low_precision_head_holds_its_weight_gradient_once(seed) -> None:  # noqa: ANN001
    """bf16 head, 4 chunks: the fp32 accumulator (2 W), its bf16 result (W) and small blocks, never a whole
    [V, D] product beside the accumulator, nor an fp32 copy of the gradient in backward. The earlier form
    peaked at 5 W (an fp32 product in backward, a bf16 product a chunk in forward)."""
    v, d, n = 8192, 256, 64
    x = torch.randn(n, d, dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(v, d) / d**0.5).to(torch.bfloat16).requires_grad_()
    t = torch.randint(0, v, (n,))
    live = _LiveBytes()
    with live.mode:
        loss = linear_cross_entropy(x, w, None, t, chunk_rows=16)
        gx, gw = torch.autograd.grad(loss, [x, w])
    wb = w.numel() * w.element_size()
    ref = F.cross_entropy(F.linear(x.double(), w.double()), t)
    assert rel(loss, ref) < 1e-2 and gw.dtype == torch.bfloat16, seed
    assert live.peak < 3.6 * wb, f"peak {live.peak / wb:.2f} x the weight's bytes"
