"""Outside audit (optim): FusedAdamW's Triton kernel updated m as m + (1 - beta1)(g - m) for every beta1, torch's lerp
(its torch path) is an fma and switches to g - (g - m) beta1 for weights >= 0.5 (beta1 <= 0.5), so m differed
in the last bit at every beta1. At beta1 = 0 the kernel's m was
not g: drift from float64 AdamW 2.05e-4 at betas (0, 0) against the torch path's 8.3e-6. Now both branches, so m is
bitwise the torch path's."""

from __future__ import annotations

import os

import pytest
import torch

from stride.optim.adamw_fused_triton import FusedAdamW

if not (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"):
    pytest.skip("the Triton kernel needs a GPU or the interpreter", allow_module_level=True)


def _run(impl: str, betas: tuple[float, float], p0: torch.Tensor, grads: list[torch.Tensor]):  # noqa: ANN202
    p = torch.nn.Parameter(p0.clone())
    opt = FusedAdamW([p], lr=1e-2, betas=betas, weight_decay=0.05, impl=impl)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    assert opt.impl_used == impl
    return p.detach(), opt.state[p]["exp_avg"]


def _f64(p0: torch.Tensor, grads: list[torch.Tensor], b1: float, b2: float) -> torch.Tensor:
    p = p0.double().clone()
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    for t, g in enumerate(grads, 1):
        g = g.double()
        p *= 1 - 1e-2 * 0.05
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        p -= 1e-2 * (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + 1e-8)
    return p


@pytest.mark.parametrize("betas", [(0.0, 0.0), (0.3, 0.0), (0.5, 0.9), (0.0, 0.999), (0.9, 0.999)])
def test_the_kernels_first_moment_is_torchs_lerp(betas: tuple[float, float]) -> None:
    g = torch.Generator().manual_seed(0)
    p0 = torch.randn(4099, generator=g)
    grads = [torch.randn(4099, generator=g) * 10.0 ** (k % 3 - 1) for k in range(12)]
    (pt, mt), (pk, mk) = _run("torch", betas, p0, grads), _run("triton", betas, p0, grads)
    assert torch.equal(mk, mt)  # was: differed from the first step at beta1 <= 0.5
    ref = _f64(p0, grads, *betas)
    drift = [((x.double() - ref).norm() / (ref - p0.double()).norm()).item() for x in (pt, pk)]
    assert drift[1] <= 1.5 * drift[0] + 1e-7, drift  # (0, 0): was 2.05e-4 against torch's 8.3e-6
