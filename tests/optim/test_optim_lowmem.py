"""AdamW8bit and Adafactor: quantisation error, state bytes, state dicts, DTensor refusal, quality parity."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from stride.optim.adafactor import Adafactor
from stride.optim.adamw8bit import BLOCK, AdamW8bit, dequantize, quantize
from stride.optim.parity import run_regression
from stride.optim.state import optimizer_state_bytes

KW = {"betas": (0.9, 0.95), "weight_decay": 0.01}


def test_blockwise_fp8_round_trip_error_is_bounded(seed):
    """e4m3 has 3 mantissa bits: every normal value comes back within 2^-4 relative (half an ulp)."""
    x = torch.randn(64, BLOCK, dtype=torch.float64) * torch.logspace(-3, 3, 64, dtype=torch.float64)[:, None]
    codes, scale = quantize(x.float())
    back = dequantize(codes, scale).double()
    assert codes.dtype == torch.float8_e4m3fn and codes.element_size() == 1
    scaled = x.abs() / scale.double()[:, None]
    normal = scaled >= 2.0**-6  # below: e4m3 subnormals, absolute error <= 2^-10 of the scale
    relerr = ((back - x).abs() / x.abs())[normal]
    abserr = ((back - x).abs() / scale.double()[:, None])[~normal]
    assert relerr.max() <= 2.0**-4 + 1e-6, f"seed={seed}"
    assert abserr.numel() == 0 or abserr.max() <= 2.0**-10 + 1e-9, f"seed={seed}"
    # the block's absmax itself is exact (it maps to 448, a code)
    assert torch.allclose(back.abs().amax(1), x.abs().amax(1), rtol=1e-6)


def test_state_bytes_per_parameter():
    big = torch.nn.Parameter(torch.randn(512, 384))
    small = torch.nn.Parameter(torch.randn(100))  # < min_8bit_size: fp32 moments
    for p in (big, small):
        p.grad = torch.randn_like(p)
    o8 = AdamW8bit([big, small], lr=1e-3)
    o8.step()
    big_bytes = 2 * (big.numel() + big.numel() // BLOCK * 4)  # codes + fp32 scales, two moments
    assert optimizer_state_bytes(o8) == big_bytes + 8 * small.numel() + 2 * 4  # + two fp32 step counters
    assert abs(big_bytes / big.numel() - 2.03125) < 1e-9
    oa = Adafactor([big, small], lr=1e-3)
    oa.step()
    factored = (512 + 384) * 4 + 2 * big.numel()  # row/col fp32 + bf16 momentum
    assert optimizer_state_bytes(oa) == factored + (4 + 2) * small.numel() + 2 * 4
    ref = torch.optim.AdamW([big, small], lr=1e-3)
    ref.step()
    assert optimizer_state_bytes(ref) == 8 * (big.numel() + small.numel()) + 2 * 4


class _Sub(torch.Tensor):
    """A stand-in for a quantised-state tensor subclass (as torchao's): its bytes are its parts'."""

    @staticmethod
    def __new__(cls, codes, scale):
        t = torch.Tensor._make_wrapper_subclass(cls, codes.shape, dtype=torch.float32)
        t.codes, t.scale = codes, scale
        return t

    def __tensor_flatten__(self):
        return ["codes", "scale"], None

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(f"{func} on the test subclass")


def test_state_bytes_counts_subclass_parts_and_shared_tensors_once():
    p, q = torch.nn.Parameter(torch.zeros(4, 256)), torch.nn.Parameter(torch.zeros(10))
    opt = torch.optim.SGD([p, q], lr=0.1)
    shared = torch.zeros(256)  # like bitsandbytes' qmap, referenced from every parameter's state
    opt.state[p] = {"m": _Sub(torch.zeros(4, 256, dtype=torch.uint8), torch.zeros(4)), "qmap": shared, "step": 3}
    opt.state[q] = {"m": torch.zeros(10), "qmap": shared}
    assert optimizer_state_bytes(opt) == (1024 + 16) + 256 * 4 + 40


@pytest.mark.parametrize("cls", [AdamW8bit, Adafactor])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_state_dict_round_trip_keeps_dtypes_and_continues_identically(cls, dtype, seed):
    def params():
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(s, generator=g).to(dtype).requires_grad_() for s in [(80, 70), (9,), (3, 4, 5)]]

    grads = [[torch.randn(p.shape) for p in params()] for _ in range(5)]
    a, b = params(), params()
    oa = cls(a, lr=1e-2, **KW) if cls is Adafactor else cls(a, lr=1e-2, min_8bit_size=256, **KW)
    for gs in grads[:3]:
        for p, g in zip(a, gs, strict=True):
            p.grad = g.to(dtype)
        oa.step()
    ob = cls(b, lr=1e-2, **KW) if cls is Adafactor else cls(b, lr=1e-2, min_8bit_size=256, **KW)
    with torch.no_grad():
        for x, y in zip(a, b, strict=True):
            y.copy_(x)
    ob.load_state_dict(oa.state_dict())
    for x, y in zip(a, b, strict=True):
        for k, v in oa.state[x].items():
            assert ob.state[y][k].dtype == v.dtype and torch.equal(ob.state[y][k].float(), v.float()), k
    for gs in grads[3:]:
        for pa, pb, g in zip(a, b, gs, strict=True):
            pa.grad, pb.grad = g.to(dtype), g.to(dtype)
        oa.step()
        ob.step()
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_dtensor_parameters_are_refused_clearly():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        p = torch.nn.Parameter(distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)]))
        for cls in (AdamW8bit, Adafactor):
            with pytest.raises(TypeError, match="is a DTensor"):
                cls([p], lr=1e-3)
    finally:
        if own:
            dist.destroy_process_group()


@pytest.mark.parametrize("name", ["adamw8bit", "adafactor"])
def test_reduces_loss_on_small_regression(name):
    make = {
        "adamw8bit": lambda ps: AdamW8bit(ps, lr=1e-2, **KW),
        "adafactor": lambda ps: Adafactor(ps, lr=1e-2, **KW),
    }[name]
    start = run_regression(name, make, steps=0).val_loss
    r = run_regression(name, make, steps=60)
    assert r.val_loss < 0.5 * start, (start, r.val_loss)
    print(f"{name}: val {start:.4f} -> {r.val_loss:.4f}, {r.bytes_per_param:.3f} state bytes/param")


@pytest.mark.slow
def test_quality_parity_with_adamw():
    """Each optimizer at its best lr of {5e-3, 1e-2, 2e-2}: final val MSE within 1% of AdamW's best."""
    makers = {
        "adamw": lambda lr: lambda ps: torch.optim.AdamW(ps, lr=lr, **KW),
        "adamw8bit": lambda lr: lambda ps: AdamW8bit(ps, lr=lr, **KW),
        "adafactor": lambda lr: lambda ps: Adafactor(ps, lr=lr, **KW),
    }
    best = {}
    for name, mk in makers.items():
        runs = [run_regression(name, mk(lr)) for lr in (5e-3, 1e-2, 2e-2)]
        best[name] = min(runs, key=lambda r: r.val_loss)
    for name, r in best.items():
        print(f"{name}: val {r.val_loss:.5f} ({r.val_loss / best['adamw'].val_loss - 1:+.2%}), "
              f"{r.bytes_per_param:.3f} state bytes/param")
    for name in ("adamw8bit", "adafactor"):
        assert best[name].val_loss <= 1.01 * best["adamw"].val_loss, (name, best[name], best["adamw"])
    assert best["adamw8bit"].bytes_per_param < 2.2 and best["adafactor"].bytes_per_param < 2.2

