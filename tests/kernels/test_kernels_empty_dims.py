"""Outside audit (kernels): an empty head dimension (RoPE, D = 0) raised ZeroDivisionError in the Triton op where the
torch op returned an empty tensor; a loss over no horizons (H = 0) raised a reshape error on the Triton path and
returned NaN (mean) or a reshape error (horizon) on the torch path. Now RoPE gives the empty result on both, and
ts_loss refuses H = 0 by name on both."""

from __future__ import annotations

import os

import pytest
import torch

from stride.kernels import get_ops

DEV = "cuda" if torch.cuda.is_available() else "cpu"
IMPLS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(
    not (DEV == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"), reason="Triton needs a GPU or the interpreter"))]


@pytest.mark.parametrize("impl", IMPLS)
def test_rope_of_an_empty_head_dim_is_empty_with_an_empty_gradient(impl: str) -> None:
    x = torch.randn(2, 3, 0, device=DEV, requires_grad=True)
    cs = torch.zeros(3, 0, device=DEV)
    y = get_ops(impl).rope(x, cs, cs)
    assert y.shape == (2, 3, 0) and y.dtype == x.dtype
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == (2, 3, 0)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("kind", "pred_shape"), [("mse", (4, 0)), ("huber", (4, 0)), ("quantile", (4, 0, 2))])
@pytest.mark.parametrize("reduction", ["mean", "horizon"])
def test_ts_loss_refuses_no_horizons_by_name(impl: str, kind: str, pred_shape: tuple[int, ...],
                                             reduction: str) -> None:
    q = [0.2, 0.8] if kind == "quantile" else None
    with pytest.raises(ValueError, match=r"ts_loss: target \(4, 0\) has no horizons \(H = 0\)"):
        get_ops(impl).ts_loss(torch.randn(pred_shape, device=DEV), torch.randn(4, 0, device=DEV), kind,
                              quantiles=q, reduction=reduction)


@pytest.mark.parametrize("impl", IMPLS)
def test_ts_loss_with_no_rows_but_horizons_is_unchanged(impl: str) -> None:
    """Rows = 0 is not H = 0: the mean over no elements, NaN, as torch's mean gives (both paths)."""
    loss = get_ops(impl).ts_loss(torch.randn(0, 3, device=DEV), torch.randn(0, 3, device=DEV))
    assert torch.isnan(loss)
