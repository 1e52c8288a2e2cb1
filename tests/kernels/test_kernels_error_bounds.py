"""Outside audit 19: the error bounds docs/kernels.md states for the Triton ops, measured against float64 written
here (not stride's reference.py), on shapes the other tests do not use (prime and non-power-of-two sizes, one row,
rows longer than one program's block, vocabularies longer than one CE block), and the defects the audit found:
a masked leading block of classes made the CE kernel NaN, a strided `starts` made the window gather read the wrong
windows, inputs one op set took and the other refused, and NaN residuals that got a finite gradient.

The bound is max|got - ref| / max|ref| per output and per input gradient, with the float64 reference computed on the
same (rounded) inputs; linear CE's, whose outputs are sums that can cancel, divide by the size of the terms summed
instead (see `lce_scales`). The tolerances are the documented bounds (docs/kernels.md, "Measured error bounds"):
1.35x or more the largest error seen over seeds 0-399, i.e. a few units of the storage dtype's rounding (fp32 2^-24,
fp16 2^-11, bf16 2^-8 relative), never a bitwise comparison.
"""

from __future__ import annotations

import logging
import os

import pytest
import torch
import torch.nn.functional as F

from stride.kernels import get_ops, runtime

DEV = "cuda" if torch.cuda.is_available() else "cpu"
if not (DEV == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"):
    pytest.skip("the Triton kernels need a GPU or the interpreter", allow_module_level=True)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# documented bounds on max|err| / max|ref| (docs/kernels.md). Largest seen over seeds 0-399 (norms, SwiGLU, RoPE,
# ts_loss): fp32 1.2e-6, bf16 6.5e-3, fp16 9.3e-4. Linear CE's gradients go through two matmuls in the storage dtype
# (the logits' gradient is stored in it, grad_W summed over chunks): fp32 1.8e-6, bf16 2.2e-2, fp16 1.7e-3.
BOUND = {torch.float32: 2e-6, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}
BOUND_LCE = {torch.float32: 3e-6, torch.bfloat16: 3e-2, torch.float16: 3e-3}


def max_err(got: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    """max|got - ref| / max|scale|, scale = ref unless given (the size of the terms a cancelling sum adds). The scale
    is at least the got dtype's smallest normal: a value below it is stored with an absolute error of half a subnormal
    step, not a relative one (the one-element SwiGLU case's fp16 output of ~1e-5 read 3.6e-3 of itself, seed 179)."""
    den = (ref if scale is None else scale).abs().max().clamp_min(torch.finfo(got.dtype).tiny)
    return ((got.double() - ref).abs().max() / den).item()


def errors(fn, ref_fn, inputs: list[torch.Tensor], dtype: torch.dtype, out_dtype: torch.dtype | None = None):
    """{name: max_err} for the output and each gradient of fn(inputs cast to dtype) against float64 ref_fn;
    linear CE's against the sizes of the terms its sums add (`lce_scales`)."""
    xs = [t.to(dtype).detach().requires_grad_(t.requires_grad) if t.is_floating_point() else t for t in inputs]
    rs = [t.to(dtype).double().detach().requires_grad_(t.requires_grad) if t.is_floating_point() else t
          for t in inputs]
    out, ref = fn(*xs), ref_fn(*rs)
    assert out.dtype == (out_dtype or dtype) and out.shape == ref.shape
    diff = [i for i, t in enumerate(inputs) if t.requires_grad]
    g = torch.randn(ref.shape, dtype=torch.float64, device=DEV)
    g = g.sign() * (0.5 + g.abs())  # |g| >= 0.5: no fp16 subnormal gradients (test_kernels_ops.check)
    scales = {lce_ref: lce_scales, swiglu_ref: swiglu_scales}.get(ref_fn, lambda *a: {})(*[r.detach() for r in rs], g)
    errs = {"out": max_err(out, ref, scales.get("out"))}
    got_g = torch.autograd.grad(out, [xs[i] for i in diff], g.to(out.dtype))
    ref_g = torch.autograd.grad(ref, [rs[i] for i in diff], g)
    for i, a, b in zip(diff, got_g, ref_g, strict=True):
        assert a.dtype == xs[i].dtype and a.shape == xs[i].shape
        errs[f"grad{i}"] = max_err(a, b, scales.get(f"grad{i}"))
    return errs


def randn(*shape, scale=1.0, shift=0.0, grad=True):
    return (shift + scale * torch.randn(*shape, dtype=torch.float64, device=DEV)).requires_grad_(grad)


def rms_ref(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def ln_ref(x, w, b):
    m = x.mean(-1, keepdim=True)
    return (x - m) / torch.sqrt((x - m).pow(2).mean(-1, keepdim=True) + 1e-5) * w + b


def rope_ref(x, c, s):
    c, s = c[: x.shape[-2]].double(), s[: x.shape[-2]].double()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), -1).flatten(-2)


def rope_tables(t: int, d: int):
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.outer(torch.arange(t, dtype=torch.float64), inv)
    return ang.cos().float().to(DEV), ang.sin().float().to(DEV)


def ts_ref(kind, q=None, delta=0.7, reduction="mean"):
    def f(p, y):
        y = y.detach()
        if kind == "mse":
            el = (p - y) ** 2
        elif kind == "huber":
            r = (p - y).abs()
            el = torch.where(r <= delta, 0.5 * r * r, delta * (r - 0.5 * delta))
        else:
            qt = torch.tensor(q, dtype=torch.float64, device=DEV)
            e = y.unsqueeze(-1) - p
            el = torch.maximum(qt * e, (qt - 1) * e).mean(-1)
        return el.mean() if reduction == "mean" else el.reshape(-1, el.shape[-1]).mean(0)
    return f


def lce_ref(x, w, b, t):
    return F.cross_entropy(x @ w.t() + b, t)


def swiglu_ref(a, b):
    return a * torch.sigmoid(a) * b


def swiglu_scales(a, b, g):
    """SwiGLU's gradient in the gate, g b sigmoid(a) (1 + a (1 - sigmoid(a))), cancels where silu'(a) = 0 (a near
    -1.28): on the one-element case fp32 read 4.5e-6 of it (seed 96 of 400), 2x the bound. Its terms' size instead."""
    s = torch.sigmoid(a)
    return {"grad0": (g * b).abs() * s * (1 + a.abs() * (1 - s))}


def lce_scales(x, w, b, t, g):
    """The sizes of the terms linear CE's loss and gradients sum, in float64: the denominators of their errors.

    grad_x = dz @ W with dz = g (softmax - onehot) / n is a dot product whose terms can cancel: CI's seed 1266434485
    (fp16, N 1, D 3, V 5) gave a grad_x of 0.075 from terms summing to 1.4 in size, and the fp16 kernel's error of
    4e-4, one unit of fp16's rounding of those terms, read 6e-3 of max|ref|, twice the bound. A dot product's
    rounding error is bounded by the sum of |terms| (Higham, Accuracy and Stability, 3.1), so that is the scale here
    (3e-4 for that seed); likewise grad_W = dz^T x, grad_b = sum of dz over rows, loss = mean(lse - z_target)."""
    z = x @ w.t() + b
    dz = (torch.softmax(z, -1) - F.one_hot(t, z.shape[-1]).to(z.dtype)).abs() * g.abs() / z.shape[0]
    zt = z.gather(-1, t[:, None]).squeeze(-1)
    return {"out": (torch.logsumexp(z, -1).abs() + zt.abs()).mean(), "grad0": dz @ w.abs(), "grad1": dz.t() @ x.abs(),
            "grad2": dz.sum(0)}


def _cases():
    """(name, fn(ops), ref, make_inputs) on shapes the other tests do not use."""
    cases = []
    for rows, d in [(1, 7), (13, 97), (2, 4099)]:  # one row; prime widths; a row of more than 4096 values
        cases.append((f"rms_norm {rows}x{d}", lambda o: lambda x, w: o.rms_norm(x, w, 1e-6), rms_ref,
                      lambda rows=rows, d=d: [randn(rows, d), randn(d, shift=1)]))
        cases.append((f"layer_norm {rows}x{d}", lambda o: lambda x, w, b: o.layer_norm(x, w, b, 1e-5), ln_ref,
                      lambda rows=rows, d=d: [randn(rows, d, shift=3), randn(d, shift=1), randn(d, scale=0.1)]))
    for shape in [(1,), (7, 13), (3, 1031)]:  # one element; primes; more than one 1024-element block
        cases.append((f"swiglu {shape}", lambda o: o.swiglu, swiglu_ref,
                      lambda shape=shape: [randn(*shape, scale=2), randn(*shape)]))
    for shape in [(1, 1, 1, 2), (2, 3, 7, 22), (1, 2, 3, 96), (3, 11, 6)]:  # D/2 = 1, 11 (strided kernel), 48, 3
        cos, sin = rope_tables(shape[-2] + 2, shape[-1])
        cases.append((f"rope {shape}", lambda o, c=cos, s=sin: lambda x: o.rope(x, c, s),
                      lambda x, c=cos, s=sin: rope_ref(x, c, s), lambda shape=shape: [randn(*shape)]))
    for rows, h in [(1, 1), (131, 5), (3, 97)]:
        for kind in ("mse", "huber"):
            for red in ("mean", "horizon"):
                cases.append((f"ts_loss {kind} {red} {rows}x{h}",
                              lambda o, k=kind, r=red: lambda p, y: o.ts_loss(p, y, k, delta=0.7, reduction=r),
                              ts_ref(kind, reduction=red),
                              lambda rows=rows, h=h: [randn(rows, h), randn(rows, h, grad=False)]))
        qs = [0.05, 0.3, 0.5, 0.77, 0.95]
        cases.append((f"ts_loss quantile {rows}x{h}x5",
                      lambda o, qs=qs: lambda p, y: o.ts_loss(p, y, "quantile", quantiles=qs), ts_ref("quantile", q=qs),
                      lambda rows=rows, h=h: [randn(rows, h, 5), randn(rows, h, grad=False)]))
    for n, d, v, ch in [(1, 3, 5, None), (7, 13, 31, 3), (4, 5, 2053, 3)]:  # V prime, > 2 CE blocks of 1024 (CPU)
        cases.append((f"linear_ce n{n} d{d} v{v} chunk{ch}",
                      lambda o, ch=ch: lambda x, w, b, t: o.linear_cross_entropy(x, w, b, t, chunk_rows=ch), lce_ref,
                      lambda n=n, d=d, v=v: [randn(n, d), randn(v, d, scale=0.5), randn(v, scale=0.1),
                                             torch.randint(0, v, (n,), device=DEV)]))
    return cases


CASES = _cases()


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_triton_ops_within_documented_bounds_of_float64(case, dtype, seed):
    name, make_fn, ref_fn, make_inputs = case
    fn = make_fn(get_ops("triton"))
    out_dtype = torch.float32 if name.startswith(("ts_loss", "linear_ce")) else None
    errs = errors(fn, ref_fn, make_inputs(), dtype, out_dtype)
    bound = (BOUND_LCE if name.startswith("linear_ce") else BOUND)[dtype]
    assert max(errs.values()) < bound, f"seed={seed} {name} {dtype} errors={errs} bound={bound}"


# ---- defects found by the audit: each test fails on the code before it ----


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_ce_with_a_masked_leading_block_of_classes_is_finite(impl, seed):
    """A -inf bias on classes 0..1099 of 1500 (more than one CE block: 1024 on the CPU; on a GPU 8192, so there
    V > 8192 would show it): the Triton kernel's online log-sum-exp took exp(-inf - -inf) = NaN in the first block,
    and the loss, grad_x and every row of grad_W were NaN. Now as float64 F.cross_entropy."""
    v = 9000 if DEV == "cuda" else 1500
    x, w = randn(3, 4), randn(v, 4)
    b = torch.zeros(v, dtype=torch.float64, device=DEV)
    b[: v - 400] = -float("inf")
    t = torch.tensor([v - 300, v - 1, v - 2], device=DEV)
    errs = errors(lambda x, w, b, t: get_ops(impl).linear_cross_entropy(x, w, b, t), lce_ref, [x, w, b, t],
                  torch.float32)
    assert max(errs.values()) < BOUND_LCE[torch.float32], f"seed={seed} {errs}"


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_ce_row_of_all_minus_inf_is_nan_on_both_paths(impl):
    """Documented: a row whose logits are all -inf has no distribution; its loss is NaN (as F.cross_entropy)."""
    b = torch.full((1500,), -float("inf"), device=DEV)
    loss = get_ops(impl).linear_cross_entropy(torch.randn(2, 4, device=DEV), torch.randn(1500, 4, device=DEV), b,
                                              torch.tensor([0, 5], device=DEV))
    assert torch.isnan(loss)


def test_window_gather_reads_a_strided_starts_view_correctly():
    """`starts` as a column of a wider table (a strided view): the kernel read starts at flat offsets and gathered
    other windows (max difference 2.85 on this input), silently."""
    from stride.kernels.triton_window_gather import gather_windows

    rows, targets = torch.randn(50, 3, device=DEV), torch.randn(40, 2, device=DEV)
    starts = (torch.arange(0, 80, 2, device=DEV)[:40] % 40)
    strided = torch.stack([starts, starts.flip(0)], 1)[:, 0]
    assert not strided.is_contiguous() and torch.equal(strided, starts)
    ids = torch.tensor([0, 5, 39, 7], device=DEV)
    x, y = gather_windows(rows, strided, targets, ids, 4)
    assert torch.equal(x, torch.stack([rows[s : s + 4] for s in starts[ids].tolist()]))
    assert torch.equal(y, targets[ids])


def test_window_gather_names_bad_arguments():
    """A 1-D targets gave IndexError('tuple index out of range'); out-of-range ids and windows past the table read
    memory outside the tables (on the CPU they are now checked); seq_len 0 left the targets uninitialised."""
    from stride.kernels.triton_window_gather import gather_windows

    rows, targets = torch.randn(50, 3, device=DEV), torch.randn(40, 2, device=DEV)
    starts, ids = torch.arange(40, device=DEV), torch.tensor([0, 5, 39], device=DEV)
    with pytest.raises(ValueError, match=r"targets must be \[windows, K\]"):
        gather_windows(rows, starts, targets[:, 0], ids, 4)
    with pytest.raises(ValueError, match="ids and starts must be 1-D"):
        gather_windows(rows, starts, targets, ids.view(3, 1), 4)
    with pytest.raises(ValueError, match="seq_len must be an int >= 0"):
        gather_windows(rows, starts, targets, ids, -1)
    _, y = gather_windows(rows, starts, targets, ids, 0)
    assert torch.equal(y, targets[ids])
    if DEV == "cpu":
        with pytest.raises(ValueError, match=r"ids\[1\] = 40 is not a window in \[0, 40\)"):
            gather_windows(rows, starts, targets, torch.tensor([3, 40]), 4)
        with pytest.raises(ValueError, match=r"ids\[0\] = -1"):
            gather_windows(rows, starts, targets, torch.tensor([-1]), 4)
        with pytest.raises(ValueError, match=r"spans rows \[58, 62\), outside the table's 50 rows"):
            gather_windows(rows, starts + 20, targets, torch.tensor([38]), 4)


@pytest.mark.parametrize(("op", "call"), [
    ("rms_norm", lambda o, x: o.rms_norm(x, torch.ones(x.shape[-1], device=DEV))),
    ("swiglu", lambda o, x: o.swiglu(x, x * 2)),
    ("rope", lambda o, x: o.rope(x.view(2, 3, 4), torch.ones(3, 2, device=DEV), torch.zeros(3, 2, device=DEV))),
    ("ts_loss", lambda o, x: o.ts_loss(x, torch.zeros_like(x))),
])
def test_triton_ops_fall_back_for_float64_and_say_so(op, call, monkeypatch, caplog):
    """float64 data: the Triton ops raised TypeError where the torch ops computed, so one call worked or failed by
    `train.kernels`. Now the torch fallback runs (the same numbers) with one notice naming the op and the dtype."""
    monkeypatch.setattr(runtime, "_noticed", set())
    x = torch.randn(2, 12, dtype=torch.float64, device=DEV)
    with caplog.at_level(logging.WARNING, "stride.kernels"):
        got = call(get_ops("triton"), x)
        call(get_ops("triton"), x)
    assert torch.equal(got, call(get_ops("torch"), x))
    notices = [r.getMessage() for r in caplog.records if "PyTorch fallback" in r.getMessage()]
    assert notices == [f"stride.kernels: {op} got dtype torch.float64, which its Triton kernel does not take; "
                       "using the PyTorch fallback"], notices


def test_norm_rows_wider_than_the_kernel_fall_back(monkeypatch, caplog):
    """D > MAX_ROW_WIDTH: a ValueError on the Triton path only; now the torch fallback, with a notice."""
    monkeypatch.setattr(runtime, "MAX_ROW_WIDTH", 64)  # the real limit is 65536: the same code path, a small input
    monkeypatch.setattr("stride.kernels.ops.MAX_ROW_WIDTH", 64)
    monkeypatch.setattr(runtime, "_noticed", set())
    x, w = torch.randn(2, 100, device=DEV), torch.rand(100, device=DEV) + 0.5
    with caplog.at_level(logging.WARNING, "stride.kernels"):
        y = get_ops("triton").layer_norm(x, w, None)
    assert torch.equal(y, get_ops("torch").layer_norm(x, w, None))
    assert any("layer_norm got rows of 100 values" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_swiglu_takes_gate_and_up_of_different_dtypes(impl, seed):
    """An fp32 gate with a bf16 up: the torch path computed, the Triton path raised ValueError. Both now match
    float64 (output in gate's dtype, each gradient in its input's)."""
    a, b = randn(5, 37, scale=2), randn(5, 37)
    ops = get_ops(impl)
    xa, xb = a.float().detach().requires_grad_(), b.bfloat16().detach().requires_grad_()
    out = ops.swiglu(xa, xb)
    ra, rb = xa.double().detach().requires_grad_(), xb.double().detach().requires_grad_()
    ref = ra * torch.sigmoid(ra) * rb
    ga, gb = torch.autograd.grad(out, (xa, xb), torch.ones_like(out))
    rga, rgb = torch.autograd.grad(ref, (ra, rb), torch.ones_like(ref))
    assert out.dtype == torch.float32 and ga.dtype == torch.float32 and gb.dtype == torch.bfloat16
    assert max_err(out, ref) < BOUND[torch.float32] and max_err(ga, rga) < BOUND[torch.float32], seed
    assert max_err(gb, rgb) < BOUND[torch.bfloat16], seed


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_norm_weight_and_bias_are_checked_alike(impl):
    """The torch path broadcast a wrong-size weight (or gave a broadcasting RuntimeError), took an integer weight,
    and gave AttributeError for weight None; the Triton path said 'norm: weight/bias must be'. One message now."""
    ops, x = get_ops(impl), torch.randn(4, 8, device=DEV)
    with pytest.raises(ValueError, match=r"rms_norm: weight must have shape \[8\] for x of shape \(4, 8\), got \(1,\)"):
        ops.rms_norm(x, torch.ones(1, device=DEV))
    with pytest.raises(ValueError, match=r"layer_norm: bias must have shape \[8\]"):
        ops.layer_norm(x, torch.ones(8, device=DEV), torch.ones(3, device=DEV))
    with pytest.raises(TypeError, match="layer_norm: weight must be a tensor of shape"):
        ops.layer_norm(x, None)
    with pytest.raises(TypeError, match="rms_norm: weight dtype torch.int64"):
        ops.rms_norm(x, torch.ones(8, dtype=torch.int64, device=DEV))


def test_rope_row_kernel_refuses_a_half_that_is_not_a_power_of_two():
    """rows=True with D/2 = 3 failed inside Triton (InterpreterError: arange's range must be a power of 2)."""
    from stride.kernels.triton_rope import rope

    with pytest.raises(ValueError, match="rows=True needs D/2 a power of two, got D = 6"):
        rope(torch.randn(2, 3, 6, device=DEV), torch.ones(3, 3, device=DEV), torch.zeros(3, 3, device=DEV), rows=True)


@pytest.mark.parametrize("kind", ["mse", "huber", "quantile"])
@pytest.mark.parametrize("where", ["pred", "target"])
def test_ts_loss_nan_residual_gives_nan_loss_and_nan_gradient_there(kind, where):
    """Documented: a NaN in pred or target makes the loss NaN and that element's gradient NaN, the others finite.
    The Triton kernel gave the NaN element a finite gradient for Huber (-delta) and pinball (0.5 - tau)."""
    p = torch.randn(4, 3, *((2,) if kind == "quantile" else ()), device=DEV)
    y = torch.randn(4, 3, device=DEV)
    (p if where == "pred" else y)[1, 2] = float("nan")
    p.requires_grad_()
    loss = get_ops("triton").ts_loss(p, y, kind, quantiles=[0.2, 0.8] if kind == "quantile" else None)
    (g,) = torch.autograd.grad(loss, p)
    assert torch.isnan(loss)
    nan = torch.zeros_like(g, dtype=torch.bool)
    nan[1, 2] = True
    assert torch.equal(torch.isnan(g), nan), g


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_linear_ce_without_classes_or_features(impl):
    """V = 0: the torch path failed in gather ('index 0 is out of bounds'), the Triton path returned NaN; now one
    ValueError. D = 0: both failed in reshape ('cannot reshape tensor of 0 elements'); now log(V), as
    F.cross_entropy."""
    ops = get_ops(impl)
    with pytest.raises(ValueError, match="weight must have at least one class"):
        ops.linear_cross_entropy(torch.randn(3, 4, device=DEV), torch.randn(0, 4, device=DEV), None,
                                 torch.full((3,), -100, device=DEV))
    loss = ops.linear_cross_entropy(torch.randn(3, 0, device=DEV), torch.randn(9, 0, device=DEV), None,
                                    torch.tensor([0, 4, 8], device=DEV))
    assert abs(loss.item() - torch.log(torch.tensor(9.0)).item()) < 1e-6
    y = get_ops(impl).rms_norm(torch.randn(3, 0, device=DEV), torch.ones(0, device=DEV))
    assert y.shape == (3, 0)
