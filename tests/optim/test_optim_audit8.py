"""Audit 8 (kernels and optimizers): a torch.optim.AdamW state dict of bf16 parameters loads into FusedAdamW with fp32
moments (it corrupted the heap on the Triton path), and stride's optimizers refuse what torch's AdamW refuses."""

from __future__ import annotations

import io

import pytest
import torch

from stride.optim.adafactor import Adafactor
from stride.optim.adamw8bit import AdamW8bit
from stride.optim.adamw_fused_triton import FusedAdamW


def _torch_adamw_state(dtype: torch.dtype) -> tuple[torch.nn.Parameter, dict]:
    g = torch.Generator().manual_seed(0)
    p = torch.nn.Parameter(torch.randn(3000, generator=g).to(dtype))
    a = torch.optim.AdamW([p], lr=1e-3)
    p.grad = torch.randn(3000, generator=g).to(dtype)
    a.step()
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    return p, torch.load(buf)


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_a_bf16_torch_adamw_state_loads_with_fp32_moments_and_steps(impl: str) -> None:
    p, sd = _torch_adamw_state(torch.bfloat16)
    assert sd["state"][0]["exp_avg"].dtype == torch.bfloat16  # what torch saves for bf16 parameters
    f = FusedAdamW([p], lr=1e-3, impl=impl)
    f.load_state_dict(sd)
    st = f.state[p]
    assert st["exp_avg"].dtype == st["exp_avg_sq"].dtype == torch.float32
    assert torch.equal(st["exp_avg"], sd["state"][0]["exp_avg"].float())  # the upcast is exact
    before = p.detach().clone()
    p.grad = torch.ones(3000, dtype=torch.bfloat16)
    f.step()  # was: RuntimeError (torch path), heap corruption (Triton path)
    assert torch.isfinite(p.float()).all() and not torch.equal(p.detach(), before)


def test_a_moment_of_another_shape_is_refused_by_name() -> None:
    p, sd = _torch_adamw_state(torch.float32)
    sd["state"][0]["exp_avg"] = torch.zeros(10)
    with pytest.raises(ValueError, match=r"parameter 0 \(group 0, position 0, shape \(3000,\)\): "
                                         r"state 'exp_avg' has shape \(10,\), expected \(3000,\)"):
        FusedAdamW([p]).load_state_dict(sd)


def test_the_kernel_refuses_moments_that_are_not_fp32() -> None:
    from stride.optim.triton_adamw_kernel import adamw_multi_tensor

    p = torch.zeros(8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="fp32 moments"):
        adamw_multi_tensor([p], [p.clone()], [torch.zeros(8, dtype=torch.bfloat16)], [torch.zeros(8)], lr=1e-3,
                           beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, step=1)


@pytest.mark.parametrize("make", [
    lambda p, **k: FusedAdamW([p], **k),
    lambda p, **k: AdamW8bit([p], **k),
    lambda p, **k: Adafactor([p], **k),
])
@pytest.mark.parametrize(("kw", "what"), [
    ({"eps": -1e-3}, "eps"), ({"weight_decay": -1.0}, "weight_decay"), ({"lr": -1.0}, "lr"),
    ({"lr": "1e-3"}, "lr"), ({"eps": float("nan")}, "eps"),
])
def test_what_torch_adamw_refuses_is_refused(make, kw: dict, what: str) -> None:  # noqa: ANN001
    p = torch.nn.Parameter(torch.zeros(8))
    with pytest.raises(ValueError, match=rf": {what} must be"):
        make(p, **kw)


def test_what_torch_adamw_accepts_is_accepted() -> None:
    import numpy as np

    p = torch.nn.Parameter(torch.zeros(8))
    for make in (FusedAdamW, AdamW8bit, Adafactor):
        make([p], lr=torch.tensor(1e-3))
        make([p], lr=np.float32(1e-3), eps=np.float64(1e-8), weight_decay=0)
        make([p], lr=0.0)
