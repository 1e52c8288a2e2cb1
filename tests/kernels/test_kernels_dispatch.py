"""Choosing an op set: names, the CPU fallback for "triton", and the compiled set."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from stride.kernels import KERNEL_CHOICES, KernelOps, get_ops, runtime
from stride.kernels.ops import FUSED


def test_unknown_choice_names_the_options():
    with pytest.raises(ValueError, match="kernels='cuda' is not one of torch, triton, compile"):
        get_ops("cuda")


def test_kernel_choices_and_the_op_table():
    assert KERNEL_CHOICES == ("torch", "triton", "compile")
    fields = {f.name for f in dataclasses.fields(KernelOps)} - {"name", "linear_cross_entropy"}
    assert set(FUSED) == fields  # one line of FUSED per fused op, and a KernelOps field of that name
    for kind in KERNEL_CHOICES:
        ops = get_ops(kind)
        assert all(callable(getattr(ops, op)) for op in FUSED)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the fallback is for machines without a GPU")
def test_triton_without_gpu_falls_back_to_torch_once(monkeypatch, caplog):
    """Without TRITON_INTERPRET=1 a CPU machine must get the torch ops, with one notice, never the interpreter."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(runtime, "_noticed", set())
    with warnings.catch_warnings(record=True) as caught, caplog.at_level("WARNING", "stride.kernels"):
        warnings.simplefilter("always")
        first = get_ops("triton")
        second = get_ops("triton")
    assert first.name == "torch" and second is first
    notices = [r for r in caplog.records if "kernels='triton' needs a CUDA GPU" in r.getMessage()]
    assert len(notices) == 1
    assert not [w for w in caught if "needs a CUDA GPU" in str(w.message)]  # not said twice (log + warning)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU path of an op")
def test_triton_op_on_cpu_tensor_without_interpreter_uses_fallback(monkeypatch, caplog):
    """An op from the triton set given CPU tensors (no interpreter) still returns the right values."""
    ops = get_ops("triton")  # built under the interpreter (conftest)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(runtime, "_noticed", set())
    x = torch.randn(4, 6, dtype=torch.float64)
    with caplog.at_level("WARNING", "stride.kernels"):
        y = ops.rms_norm(x.float(), torch.ones(6))
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert (y.double() - ref).abs().max() < 1e-6
    assert len([r for r in caplog.records if "PyTorch fallback" in r.getMessage()]) == 1


@pytest.mark.slow
def test_compiled_ops_match_float64():
    ops = get_ops("compile")
    x = torch.randn(7, 33, dtype=torch.float64)
    w = 1 + 0.1 * torch.randn(33, dtype=torch.float64)
    y = ops.rms_norm(x.float(), w.float())
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-6


def test_device_constant_is_made_once_and_holds_the_values() -> None:
    """ts_loss's quantiles: made on the device once, not copied (and the stream waited for) every call."""
    from stride.kernels.runtime import device_constant

    a = device_constant((0.1, 0.5, 0.9), torch.float32, torch.device("cpu"))
    assert a is device_constant([0.1, 0.5, 0.9], torch.float32, torch.device("cpu"))  # type: ignore[arg-type]
    assert a.tolist() == torch.tensor([0.1, 0.5, 0.9]).tolist() and a.dtype == torch.float32
    assert device_constant((0.2,), torch.float32, torch.device("cpu")) is not a
