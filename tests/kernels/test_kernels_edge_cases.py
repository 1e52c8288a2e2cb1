"""Edge cases of the fused ops, torch and Triton paths alike (outside audit 8): bad targets, empty and all-ignored
batches, bad arguments, gradients into constants, keyword tensors, work under no_grad, integer and 0-dim inputs."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from stride.kernels import get_ops, runtime

DEV = "cuda" if torch.cuda.is_available() else "cpu"
IMPLS = ["torch", "triton"]
needs_triton = pytest.mark.skipif(
    not (DEV == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"),
    reason="the Triton kernels need a GPU or the interpreter",
)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bad", [5, 1000, -1])
def test_linear_ce_refuses_a_target_outside_the_classes(impl, bad):
    """-1 with ignore_index -100 (a common padding convention) too: the Triton path returned a loss for all three."""
    x, w = torch.randn(4, 3, device=DEV), torch.randn(5, 3, device=DEV)
    t = torch.tensor([0, 1, bad, 2], device=DEV)
    with pytest.raises(ValueError, match=rf"target\[2\] = {bad} is not a class in \[0, 5\)"):
        get_ops(impl).linear_cross_entropy(x, w, None, t)
    t[2] = -1
    get_ops(impl).linear_cross_entropy(x, w, None, t, ignore_index=-1)  # -1 as ignore_index is fine


@needs_triton
def test_ce_kernel_never_reads_outside_its_row():
    """Called directly (no range check in front), an out-of-range target must not read the next row's logits."""
    from stride.kernels.triton_cross_entropy import chunk_cross_entropy

    losses = []
    for other in (100.0, -100.0):
        logits = torch.zeros(2, 5, device=DEV)
        logits[1, 0] = other  # row 0's "column 5" in a row-major buffer
        t = torch.tensor([5, 1], device=DEV)
        losses.append(chunk_cross_entropy(logits, t, torch.tensor(2, device=DEV), -100, False)[0].item())
    assert losses[0] == losses[1], losses


@pytest.mark.parametrize("impl", IMPLS)
def test_linear_ce_all_ignored_gives_nan_loss_and_zero_grads(impl):
    """As F.cross_entropy (mean): the loss is 0 / 0, NaN, and the gradients are 0; the torch chunk made them NaN."""
    x = torch.randn(4, 3, device=DEV, requires_grad=True)
    w = torch.randn(5, 3, device=DEV, requires_grad=True)
    b = torch.randn(5, device=DEV, requires_grad=True)
    t = torch.full((4,), -100, device=DEV)
    loss = get_ops(impl).linear_cross_entropy(x, w, b, t, chunk_rows=2)
    grads = torch.autograd.grad(loss, (x, w, b))
    ref = F.cross_entropy(F.linear(x, w, b), t)
    assert torch.isnan(loss) and torch.isnan(ref)
    assert all(torch.equal(g, torch.zeros_like(g)) for g in grads)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("chunk_rows", [-2, 0, 2.5, True])
def test_linear_ce_chunk_rows_must_be_a_positive_integer(impl, chunk_rows):
    x, w, t = torch.randn(4, 3, device=DEV), torch.randn(5, 3, device=DEV), torch.randint(0, 5, (4,), device=DEV)
    with pytest.raises(ValueError, match="chunk_rows must be a positive integer"):
        get_ops(impl).linear_cross_entropy(x, w, None, t, chunk_rows=chunk_rows)


@pytest.mark.parametrize("impl", IMPLS)
def test_linear_ce_takes_a_numpy_integer_chunk_rows(impl):
    import numpy as np

    x, w, t = torch.randn(4, 3, device=DEV), torch.randn(5, 3, device=DEV), torch.randint(0, 5, (4,), device=DEV)
    a = get_ops(impl).linear_cross_entropy(x, w, None, t, chunk_rows=np.int64(2))
    assert torch.allclose(a, get_ops(impl).linear_cross_entropy(x, w, None, t, chunk_rows=2))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("chunk_rows", [None, 2])
def test_linear_ce_zero_rows_gives_zero_gradients(impl, chunk_rows):
    """An empty batch: NaN loss (F.cross_entropy's mean of nothing) and zero gradients, not a backward crash."""
    x = torch.randn(0, 3, device=DEV, requires_grad=True)
    w = torch.randn(5, 3, device=DEV, requires_grad=True)
    b = torch.randn(5, device=DEV, requires_grad=True)
    t = torch.zeros(0, dtype=torch.long, device=DEV)
    loss = get_ops(impl).linear_cross_entropy(x, w, b, t, chunk_rows=chunk_rows)
    gx, gw, gb = torch.autograd.grad(loss, (x, w, b))
    assert torch.isnan(loss) and gx.shape == (0, 3)
    assert torch.equal(gw, torch.zeros_like(w)) and torch.equal(gb, torch.zeros_like(b))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("delta", [0.0, -1.0, float("nan")])
def test_huber_delta_must_be_positive(impl, delta):
    y = torch.zeros(4, 3, device=DEV)
    with pytest.raises(ValueError, match="huber delta must be > 0"):
        get_ops(impl).ts_loss(y + 1, y, "huber", delta=delta)


@pytest.mark.parametrize("impl", [*IMPLS, pytest.param("compile", marks=pytest.mark.slow)])
def test_no_gradient_into_rope_tables_or_loss_target(impl):
    """docs/kernels.md: cos/sin and target are constants, on every op set (the torch ops differentiated into them)."""
    ops = get_ops(impl)
    x = torch.randn(3, 4, device=DEV, requires_grad=True)
    c = torch.randn(3, 2, device=DEV, requires_grad=True)
    s = torch.randn(3, 2, device=DEV, requires_grad=True)
    ops.rope(x, c, s).sum().backward()
    assert x.grad is not None and c.grad is None and s.grad is None
    for kind in ("mse", "huber"):
        y = torch.randn(5, device=DEV, requires_grad=True)
        p = torch.randn(5, device=DEV, requires_grad=True)
        ops.ts_loss(p, y, kind).backward()
        assert p.grad is not None and y.grad is None, kind
    y = torch.randn(5, device=DEV, requires_grad=True)
    p = torch.randn(5, 2, device=DEV, requires_grad=True)
    ops.ts_loss(p, y, "quantile", quantiles=[0.2, 0.8]).backward()
    assert p.grad is not None and y.grad is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback of the Triton ops")
def test_triton_op_falls_back_for_keyword_cpu_tensors(monkeypatch, caplog):
    """Tensors passed by keyword count too: with none positional the op went to Triton ('0 active drivers')."""
    ops = get_ops("triton")  # built under the interpreter (conftest)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(runtime, "_noticed", set())
    x = torch.randn(2, 4)
    with caplog.at_level("WARNING", "stride.kernels"):
        y = ops.rms_norm(x=x, weight=torch.ones(4))
        loss = ops.ts_loss(pred=x, target=torch.zeros(2, 4))
    assert torch.allclose(y, get_ops("torch").rms_norm(x, torch.ones(4)))
    assert torch.allclose(loss, x.pow(2).mean())
    notices = [r.getMessage() for r in caplog.records if "PyTorch fallback" in r.getMessage()]
    assert len(notices) == 2 and "rms_norm got tensors on cpu" in notices[0], notices


class _Shapes:
    """(shape, dtype) of every tensor an op creates in new memory (not a view of `inputs`), through a dispatch mode."""

    def __init__(self, *inputs: torch.Tensor) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten

        seen: list[tuple[tuple[int, ...], torch.dtype]] = []
        known = {t.untyped_storage().data_ptr() for t in inputs}
        self.seen = seen

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
                out = func(*args, **(kwargs or {}))
                for t in tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in known:
                        seen.append((tuple(t.shape), t.dtype))
                return out

        self.mode = Mode()


@needs_triton
@pytest.mark.parametrize("kind", ["mse", "quantile"])
def test_triton_ts_loss_under_no_grad_writes_no_gradient(kind):
    """Evaluation: the same loss, and no fp32 dL/dpred buffer of pred's size (it was allocated and written)."""
    from stride.kernels.triton_ts_loss import ts_loss

    y = torch.randn(64, 4, device=DEV)
    p = torch.randn((64, 4, 3) if kind == "quantile" else (64, 4), device=DEV, requires_grad=True)
    kw = {"quantiles": [0.1, 0.5, 0.9]} if kind == "quantile" else {}
    with_grad = ts_loss(p, y, kind, **kw)
    rows = (64, p[0].numel())
    shapes = _Shapes(p, y)
    with torch.no_grad(), shapes.mode:
        loss = ts_loss(p, y, kind, **kw)
    assert torch.equal(loss, with_grad.detach()) and loss.grad_fn is None
    assert (rows, torch.float32) not in shapes.seen, shapes.seen
    assert with_grad.grad_fn is not None  # and with grad on, the gradient is still there
    (g,) = torch.autograd.grad(with_grad, p)
    assert g.shape == p.shape


@pytest.mark.parametrize("impl", IMPLS)
def test_integer_inputs_are_refused_naming_op_and_dtype(impl):
    """The torch ops computed on integers (swiglu of int64 gave zeros) where the Triton ops raised."""
    ops = get_ops(impl)
    i = torch.ones(2, 4, dtype=torch.int64, device=DEV)
    cos, sin = torch.ones(2, 2, device=DEV), torch.zeros(2, 2, device=DEV)
    for name, call in [
        ("rms_norm", lambda: ops.rms_norm(i, torch.ones(4, device=DEV))),
        ("layer_norm", lambda: ops.layer_norm(i, torch.ones(4, device=DEV))),
        ("swiglu", lambda: ops.swiglu(i, i)),
        ("rope", lambda: ops.rope(i, cos, sin)),
        ("ts_loss", lambda: ops.ts_loss(i, i)),
        ("linear_cross_entropy", lambda: ops.linear_cross_entropy(i, i, None, torch.zeros(2, dtype=torch.long))),
    ]:
        with pytest.raises(TypeError, match=rf"{name}.*int64"):
            call()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_norm_of_a_0dim_input_is_a_clear_error(impl, op):
    with pytest.raises(ValueError, match=f"{op}: x must have at least one dimension"):
        getattr(get_ops(impl), op)(torch.tensor(2.0, device=DEV), torch.ones((), device=DEV))


@pytest.mark.parametrize("impl", IMPLS)
def test_ts_loss_takes_quantiles_as_a_tensor(impl):
    p, y = torch.randn(6, 3, 2, device=DEV), torch.randn(6, 3, device=DEV)
    ops = get_ops(impl)
    got = ops.ts_loss(p, y, "quantile", quantiles=torch.tensor([0.1, 0.9]))
    assert torch.allclose(got, ops.ts_loss(p, y, "quantile", quantiles=[0.1, 0.9]))
