"""Which optimizers take DTensor (FSDP2 / TP) parameters, what the refusal suggests, and what a step ran.

`SHARDED_PARAM_OPTIMIZERS` (stride.config.schema) is what the config check and the refusal message offer; here it
is checked against the optimizers themselves, so a name the check lets through really trains sharded, and
a suggested name exists. `optimizer_impl` is the summary's record of the path the steps took.
"""

from __future__ import annotations

import logging
import re
import typing

import pytest
import torch
import torch.distributed as dist

from stride.config.schema import SHARDED_PARAM_OPTIMIZERS, OptimConfig, OptimName
from stride.kernels import runtime
from stride.optim.factory import OPTIMIZERS, build_optimizer, optimizer_impl


@pytest.fixture
def mesh():
    """A one-rank gloo mesh: enough to make DTensor parameters in this process."""
    from torch.distributed.device_mesh import init_device_mesh

    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        if own:
            dist.destroy_process_group()


@pytest.fixture
def fresh_notices(monkeypatch: pytest.MonkeyPatch) -> None:
    """notice_once says each notice once per process: give this test its own record."""
    monkeypatch.setattr(runtime, "_noticed", set())


def test_the_sharded_list_names_existing_optimizers() -> None:
    assert set(SHARDED_PARAM_OPTIMIZERS) <= set(OPTIMIZERS) == set(typing.get_args(OptimName))


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_sharded_list_matches_what_each_optimizer_does_with_dtensors(name: str, mesh, seed: int) -> None:
    from torch.distributed.tensor import Shard, distribute_tensor

    w = torch.randn(64, 7)
    p = torch.nn.Parameter(distribute_tensor(w.clone(), mesh, [Shard(0)]))
    if name not in SHARDED_PARAM_OPTIMIZERS:
        with pytest.raises(TypeError, match="is a DTensor") as exc:
            build_optimizer([p], OptimConfig(name=name))
        suggested = re.search(r"optim\.name = one of ([^(]+) \(", str(exc.value))
        assert suggested, str(exc.value)
        assert re.findall(r"'(\w+)'", suggested.group(1)) == list(SHARDED_PARAM_OPTIMIZERS), str(exc.value)
        assert "fused_adamw" not in str(exc.value)
        return
    q = torch.nn.Parameter(w.clone())
    ours, ref = build_optimizer([p], OptimConfig(name=name)), build_optimizer([q], OptimConfig(name=name))
    for _ in range(3):
        g = torch.randn(64, 7)
        p.grad, q.grad = distribute_tensor(g, mesh, [Shard(0)]), g.clone()
        ours.step()
        ref.step()
    assert torch.equal(p.full_tensor(), q), f"seed={seed}: {name} on a DTensor differs from the plain tensor"


def test_adamw_triton_without_a_gpu_says_so_once_and_records_torch(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fresh_notices: None
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # a CPU run as a user has it (the suite sets 1)
    p = torch.nn.Parameter(torch.randn(8, 4))
    opt = build_optimizer([p], OptimConfig(name="adamw_triton"))
    assert optimizer_impl(opt) is None  # nothing ran yet
    with caplog.at_level(logging.WARNING, logger="stride.kernels"):
        for _ in range(2):
            p.grad = torch.randn(8, 4)
            opt.step()
    notices = [r.getMessage() for r in caplog.records if "adamw_triton" in r.getMessage()]
    assert len(notices) == 1, notices
    assert "needs CUDA tensors (or TRITON_INTERPRET=1)" in notices[0] and "using the torch AdamW path" in notices[0]
    assert optimizer_impl(opt) == "torch"


@pytest.mark.skipif(not runtime.triton_importable(), reason="triton is not installed")
def test_adamw_triton_records_triton_where_it_runs(monkeypatch: pytest.MonkeyPatch, fresh_notices: None) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    p = torch.nn.Parameter(torch.randn(8, 4, device=device))
    opt = build_optimizer([p], OptimConfig(name="adamw_triton"))
    p.grad = torch.randn(8, 4, device=device)
    opt.step()
    assert optimizer_impl(opt) == "triton"


@pytest.mark.parametrize(("name", "impl", "expected"), [
    ("adamw", "auto", "fused"), ("adamw", "foreach", "foreach"), ("adamw", "for-loop", "for-loop"),
    ("sgd", "auto", "foreach"), ("adafactor", "auto", "for-loop"), ("adamw8bit", "auto", "torch"),
])
def test_optimizer_impl_names_what_ran(name: str, impl: str, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    p = torch.nn.Parameter(torch.randn(64, 80))
    opt = build_optimizer([p], OptimConfig(name=name, impl=impl))
    p.grad = torch.randn(64, 80)
    opt.step()
    assert optimizer_impl(opt) == expected


@pytest.mark.slow
def test_impl_used_survives_a_compiled_step(monkeypatch: pytest.MonkeyPatch, fresh_notices: None) -> None:
    """`compile = "model+optimizer"` traces the step: dynamo dropped the record of the path (impl_used None)."""
    from stride.optim.factory import compiled_step

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    p = torch.nn.Parameter(torch.randn(8, 4))
    opt = build_optimizer([p], OptimConfig(name="adamw_triton"), tensor_lr=True)
    step = compiled_step(opt)
    for _ in range(2):
        p.grad = torch.randn(8, 4)
        step()
    assert optimizer_impl(opt) == "torch"
