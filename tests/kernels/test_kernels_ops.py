"""Every op, torch fallback and Triton kernel (interpreter on CPU), against float64 autograd references.

Inputs are fresh random each run (the seed is in every assert message). Errors are norm-wise relative:
||got - ref|| / ||ref||, for the output and for each input gradient.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from stride.kernels import get_ops

DEV = "cuda" if torch.cuda.is_available() else "cpu"
IMPLS = ["torch", "triton"]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}


def rel(got: torch.Tensor, ref: torch.Tensor) -> float:
    return ((got.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def leaf(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.to(dtype).detach().requires_grad_()


def check(impl_fn, ref_fn, inputs, dtype, seed, out_dtype=None):
    """Compare output and gradients of impl_fn(inputs) with float64 ref_fn on the same (rounded) inputs."""
    out = impl_fn(*inputs)
    assert out.dtype == (out_dtype or inputs[0].dtype)
    ref_in = [t.detach().double().requires_grad_() if t.requires_grad else t for t in inputs]
    ref = ref_fn(*ref_in)
    errs = {"out": rel(out, ref)}
    g = torch.randn(out.shape, dtype=torch.float64, device=DEV)
    # |g| >= 0.5: a tiny upstream gradient pushes fp16 input gradients into subnormals (seed 1566849592:
    # g = -0.0012 on a scalar loss, gradients ~3e-7, 1.5 % error), which measures fp16's range, not the op
    g = g.sign() * (0.5 + g.abs())
    diff = [t for t in inputs if t.requires_grad]
    got_g = torch.autograd.grad(out, diff, g.to(out.dtype))
    ref_g = torch.autograd.grad(ref, [t for t in ref_in if t.requires_grad], g)
    for i, (a, b) in enumerate(zip(got_g, ref_g, strict=True)):
        assert a.dtype == diff[i].dtype and a.shape == diff[i].shape
        errs[f"grad{i}"] = rel(a, b)
    tol = TOL[dtype]
    assert all(e < tol for e in errs.values()), f"seed={seed} dtype={dtype} errors={errs} tol={tol}"
    return errs


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width", [(1, 8), (37, 100), (5, 1000)])
def test_rms_norm(impl, dtype, rows, width, seed):
    ops = get_ops(impl)
    x = leaf(torch.randn(rows, width, device=DEV), dtype)
    w = leaf(1 + 0.1 * torch.randn(width, device=DEV), dtype)

    def ref(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    check(lambda x, w: ops.rms_norm(x, w, 1e-6), ref, [x, w], dtype, seed)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width", [(1, 8), (37, 100), (5, 1000)])
def test_layer_norm(impl, dtype, rows, width, seed):
    ops = get_ops(impl)
    x = leaf(3 + torch.randn(rows, width, device=DEV), dtype)
    w = leaf(1 + 0.1 * torch.randn(width, device=DEV), dtype)
    b = leaf(0.1 * torch.randn(width, device=DEV), dtype)
    check(
        lambda x, w, b: ops.layer_norm(x, w, b, 1e-5),
        lambda x, w, b: F.layer_norm(x, (width,), w, b, 1e-5),
        [x, w, b], dtype, seed,
    )


@pytest.mark.parametrize("impl", IMPLS)
def test_layer_norm_without_bias_and_3d_noncontiguous(impl, seed):
    ops = get_ops(impl)
    base = torch.randn(6, 40, 3, device=DEV)
    x = base.transpose(1, 2).requires_grad_()  # [6, 3, 40], non-contiguous
    w = leaf(torch.randn(40, device=DEV), torch.float32)
    assert not x.is_contiguous()
    check(
        lambda x, w: ops.layer_norm(x, w, None, 1e-5),
        lambda x, w: F.layer_norm(x, (40,), w, None, 1e-5),
        [x, w], torch.float32, seed,
    )


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (3, 7, 45), (2, 1500)])
def test_swiglu(impl, dtype, shape, seed):
    ops = get_ops(impl)
    a = 2 * torch.randn(shape, device=DEV)
    # silu'(a) = sig(a) (1 + a (1 - sig(a))) is 0 at a = -1.2785: there float32 rounding of its two terms
    # leaves a gradient with no correct digits, and a one-element case's relative error is that element's
    # (seed 1982708117: 3.2e-5 against 1e-5, torch's own silu as well as the kernel). Keep clear of the zero.
    a = torch.where((a + 1.2785).abs() < 0.05, a + 0.1, a)
    a = leaf(a, dtype)
    b = leaf(torch.randn(shape, device=DEV), dtype)
    check(ops.swiglu, lambda a, b: F.silu(a) * b, [a, b], dtype, seed)


@pytest.mark.parametrize("impl", IMPLS)
def test_swiglu_noncontiguous_halves(impl, seed):
    """gate/up as the two halves of one projection (strided views), as a fused w13 layer produces."""
    ops = get_ops(impl)
    h = torch.randn(4, 9, 2 * 30, device=DEV).requires_grad_()
    out = ops.swiglu(h[..., :30], h[..., 30:])
    (gh,) = torch.autograd.grad(out.sum(), h)
    h64 = h.detach().double().requires_grad_()
    ref = F.silu(h64[..., :30]) * h64[..., 30:]
    (gh64,) = torch.autograd.grad(ref.sum(), h64)
    assert rel(out, ref) < 1e-6 and rel(gh, gh64) < 1e-6, f"seed={seed}"


def rope_ref(x, cos, sin):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c, s = cos[: x.shape[-2]].to(x.dtype), sin[: x.shape[-2]].to(x.dtype)
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


def rope_tables(t: int, d: int):
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.outer(torch.arange(t, dtype=torch.float64), inv)
    return ang.cos().float().to(DEV), ang.sin().float().to(DEV)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 1, 2), (2, 3, 7, 12), (1, 2, 5, 72), (2, 3, 7, 16)])
def test_rope(impl, dtype, shape, seed):
    ops = get_ops(impl)
    cos, sin = rope_tables(shape[-2] + 3, shape[-1])  # longer table than T: sliced
    x = leaf(torch.randn(shape, device=DEV), dtype)
    ref = lambda x: rope_ref(x, cos.double(), sin.double())
    check(lambda x: ops.rope(x, cos, sin), ref, [x], dtype, seed)


@pytest.mark.parametrize("rows", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_row_and_strided_kernels(rows, dtype, seed):
    """Both Triton RoPE kernels (whole rows, split in registers; stride-2 pairs) against float64, on a power-of-two
    head dim (where the row kernel is the default) and 130 rows (not a multiple of the 64-row block)."""
    if not (DEV == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"):
        pytest.skip("the Triton kernels need a GPU or the interpreter")
    from stride.kernels.triton_rope import rope

    cos, sin = rope_tables(13, 16)
    x = leaf(torch.randn(2, 5, 13, 16, device=DEV), dtype)
    ref = lambda x: rope_ref(x, cos.double(), sin.double())
    check(lambda x: rope(x, cos, sin, rows=rows), ref, [x], dtype, seed)


@pytest.mark.parametrize("impl", IMPLS)
def test_rope_on_permuted_qkv(impl, seed):
    """q from a permuted qkv projection ([B, H, T, D] view, non-contiguous), as attention makes it."""
    ops = get_ops(impl)
    b, t, h, d = 2, 6, 3, 10
    qkv = torch.randn(b, t, 3, h, d, device=DEV).requires_grad_()
    q = qkv.permute(2, 0, 3, 1, 4)[0]
    assert not q.is_contiguous()
    cos, sin = rope_tables(t, d)
    out = ops.rope(q, cos, sin)
    (g,) = torch.autograd.grad((out * out).sum(), qkv)
    q64 = qkv.detach().double().requires_grad_()
    ref = rope_ref(q64.permute(2, 0, 3, 1, 4)[0], cos.double(), sin.double())
    (g64,) = torch.autograd.grad((ref * ref).sum(), q64)
    assert rel(out, ref) < 1e-6 and rel(g, g64) < 1e-6, f"seed={seed}"


def test_rope_rejects_bad_tables():
    ops = get_ops("torch")
    cos, sin = rope_tables(4, 8)
    with pytest.raises(ValueError, match="cos/sin must be"):
        ops.rope(torch.randn(1, 1, 5, 8), cos, sin)  # T=5 > table length 4
    with pytest.raises(ValueError, match="even D"):
        ops.rope(torch.randn(1, 1, 4, 7), cos, sin)


def ts_ref(kind, delta=1.0, quantiles=None, reduction="mean"):
    def fn(p, y):
        if kind == "mse":
            el = (p - y) ** 2
        elif kind == "huber":
            el = F.huber_loss(p, y, delta=delta, reduction="none")
        else:
            q = torch.tensor(quantiles, dtype=torch.float64, device=p.device)
            e = y.unsqueeze(-1) - p
            el = torch.maximum(q * e, (q - 1) * e).mean(-1)
        return el.mean() if reduction == "mean" else el.reshape(-1, el.shape[-1]).mean(0)

    return fn


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["mse", "huber", "quantile"])
@pytest.mark.parametrize("reduction", ["mean", "horizon"])
def test_ts_loss(impl, dtype, kind, reduction, seed):
    ops = get_ops(impl)
    rows, horizons, quantiles = 53, 3, [0.1, 0.5, 0.9]
    y = torch.randn(rows, horizons, device=DEV).to(dtype)
    shape = (rows, horizons, 3) if kind == "quantile" else (rows, horizons)
    p = leaf(torch.randn(shape, device=DEV), dtype)
    kw = {"delta": 0.7, "quantiles": quantiles, "reduction": reduction}
    check(
        lambda p, y: ops.ts_loss(p, y, kind, **kw),
        lambda p, y: ts_ref(kind, **kw)(p, y.double()),
        [p, y], dtype, seed, out_dtype=torch.float32,
    )


@pytest.mark.parametrize("impl", IMPLS)
def test_ts_loss_3d_batch_time_horizon(impl, seed):
    """pred [B, T, H] (a prediction per timestep) reduces over B and T in one pass."""
    ops = get_ops(impl)
    p = leaf(torch.randn(4, 9, 5, device=DEV), torch.float32)
    y = torch.randn(4, 9, 5, device=DEV)
    check(
        lambda p, y: ops.ts_loss(p, y, "huber", delta=0.5),
        lambda p, y: ts_ref("huber", 0.5)(p, y.double()),
        [p, y], torch.float32, seed,
    )


def test_ts_loss_rejects_bad_shapes():
    ops = get_ops("torch")
    with pytest.raises(ValueError, match="quantile pred"):
        ops.ts_loss(torch.randn(4, 3), torch.randn(4, 3), "quantile", quantiles=[0.5])
    with pytest.raises(ValueError, match="not one of"):
        ops.ts_loss(torch.randn(4, 3), torch.randn(4, 3), "mae")


def test_triton_ops_really_run_triton():
    """Under the interpreter (or on a GPU) the triton op set must not quietly be the fallback."""
    ops = get_ops("triton")
    assert ops.name == "triton"
    x = torch.randn(3, 8, device=DEV, requires_grad=True)
    w = torch.ones(8, device=DEV, requires_grad=True)
    assert type(ops.rms_norm(x, w).grad_fn).__name__ == "RMSNormFunctionBackward"
    assert type(ops.swiglu(x, x).grad_fn).__name__ == "SwiGLUFunctionBackward"
    assert type(ops.ts_loss(x, x.detach()).grad_fn).__name__ == "TSLossFunctionBackward"


@pytest.mark.parametrize("impl", IMPLS)
def test_pinball_ties_take_autograds_subgradient(impl):
    """pred == target happens often in bf16; the kernel must split the gradient as torch.maximum does."""
    ops = get_ops(impl)
    y = torch.tensor([[0.5, -1.0], [2.0, 0.25]], device=DEV)
    p = y.unsqueeze(-1).repeat(1, 1, 3).clone()
    p[0, 0, 1] += 0.5  # one non-tie
    p.requires_grad_()
    q = [0.1, 0.5, 0.9]
    (g,) = torch.autograd.grad(ops.ts_loss(p, y, "quantile", quantiles=q), p)
    p64 = p.detach().double().requires_grad_()
    (g64,) = torch.autograd.grad(ts_ref("quantile", quantiles=q)(p64, y.double()), p64)
    assert torch.allclose(g.double(), g64, atol=1e-8), (g, g64)


@pytest.mark.parametrize("impl", IMPLS)
def test_zero_rows(impl):
    ops = get_ops(impl)
    x = torch.randn(0, 16, device=DEV, requires_grad=True)
    w = torch.ones(16, device=DEV, requires_grad=True)
    y = ops.rms_norm(x, w)
    gx, gw = torch.autograd.grad(y.sum(), (x, w), allow_unused=True)
    assert y.shape == (0, 16) and gx.shape == (0, 16) and torch.equal(gw, torch.zeros(16, device=DEV))
    assert ops.swiglu(x, x).shape == (0, 16)


@pytest.mark.parametrize("impl", IMPLS)
def test_norms_with_fp32_weight_and_bf16_activations(impl, seed):
    """Under autocast the norm weight stays fp32 while x is bf16: y is bf16, each grad keeps its dtype."""
    ops = get_ops(impl)
    x = leaf(torch.randn(9, 48, device=DEV), torch.bfloat16)
    w = leaf(1 + 0.1 * torch.randn(48, device=DEV), torch.float32)
    b = leaf(0.1 * torch.randn(48, device=DEV), torch.float32)

    def rms_ref(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    check(lambda x, w: ops.rms_norm(x, w, 1e-6), rms_ref, [x, w], torch.bfloat16, seed)
    check(
        lambda x, w, b: ops.layer_norm(x, w, b, 1e-5),
        lambda x, w, b: F.layer_norm(x, (48,), w, b, 1e-5),
        [x, w, b], torch.bfloat16, seed,
    )
