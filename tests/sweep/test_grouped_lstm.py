"""The pack's LSTM (grouped gates with a hand-written backward, or one fused call per model) and folded
attention against torch's own nn.LSTM and scaled_dot_product_attention, model by model."""

from __future__ import annotations

import copy
import multiprocessing
import threading
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from stride.sweep.grouped_lstm import LSTM_MODE, VmapLSTM
from stride.sweep.model_lanes import per_model
from stride.sweep.vmap_ops import FoldedSDPA


@pytest.fixture(params=["grouped", "per_model"])
def mode(request):
    LSTM_MODE["mode"] = request.param
    yield request.param
    LSTM_MODE["mode"] = "auto"


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-13), (torch.float32, 5e-6)])
def test_pack_lstm_equals_nn_lstm_forward_and_backward(mode, dtype, tol, seed):
    n, b, t, i, h = 3, 5, 9, 4, 6
    lstms = [nn.LSTM(i, h, batch_first=True).to(dtype) for _ in range(n)]
    x = torch.randn(n, b, t, i, dtype=dtype, requires_grad=True)
    params = {k: v.detach().requires_grad_() for k, v in stack_module_state(lstms)[0].items()}
    skeleton = VmapLSTM(copy.deepcopy(lstms[0]).to("meta"))
    out = vmap(lambda p, xx: functional_call(skeleton, p, (xx,))[0])(params, x)
    ref = torch.stack([lstms[k](x[k])[0] for k in range(n)])
    assert (out - ref).abs().max().item() < tol, seed
    g = torch.randn_like(out)
    names = list(params)
    got = torch.autograd.grad(out, [x, *params.values()], g)
    want = torch.autograd.grad(ref, [x, *(getattr(lstms[k], name) for name in names for k in range(n))], g)
    assert (got[0] - want[0]).abs().max().item() < tol, seed
    for j, _ in enumerate(names):
        stacked_want = torch.stack(want[1 + j * n : 1 + (j + 1) * n])
        assert (got[1 + j] - stacked_want).abs().max().item() < 10 * tol, (names[j], seed)


def test_outside_vmap_it_says_where_it_runs():
    with pytest.raises(RuntimeError, match="only inside torch.func.vmap"):
        VmapLSTM(nn.LSTM(2, 3, batch_first=True))(torch.zeros(1, 4, 2))


def test_only_single_layer_batch_first_lstms_are_grouped():
    with pytest.raises(ValueError, match="num_layers=2"):
        VmapLSTM(nn.LSTM(2, 3, num_layers=2, batch_first=True))


@pytest.mark.parametrize("shared_k", [False, True])
def test_folded_attention_equals_each_models_own_call(shared_k, seed):
    n, b, heads, t, d = 3, 2, 4, 8, 16
    q, v = (torch.randn(n, b, heads, t, d, dtype=torch.float64, requires_grad=True) for _ in range(2))
    k = torch.randn(*(() if shared_k else (n,)), b, heads, t, d, dtype=torch.float64, requires_grad=True)
    dims = (0, None if shared_k else 0, 0)
    out = vmap(lambda a, kk, c: FoldedSDPA.apply(a, kk, c, True, None), in_dims=dims)(q, k, v)
    ref = torch.stack([F.scaled_dot_product_attention(q[i], k if shared_k else k[i], v[i], is_causal=True)
                       for i in range(n)])
    assert (out - ref).abs().max().item() < 1e-14, seed
    g = torch.randn_like(out)
    for a, r in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g), strict=True):
        assert (a - r).abs().max().item() < 1e-13, seed


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_per_model_work_runs_on_single_threaded_lanes(two_threads):
    seen = []

    def work(i: int) -> int:
        time.sleep(0.02)  # releases the GIL: both lanes take models
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        return i * i

    assert per_model(work, 8, torch.device("cpu")) == [i * i for i in range(8)]
    assert len({name for name, _ in seen}) == 2 and {k for _, k in seen} == {1}  # two lanes, one thread each
    assert torch.get_num_threads() == 2  # the caller's threads are restored

    def fails(i: int) -> int:
        if i == 5:
            raise ValueError("model 5")
        return i

    with pytest.raises(ValueError, match="model 5"):
        per_model(fails, 8, torch.device("cpu"))
    assert torch.get_num_threads() == 2


def test_per_model_lstms_on_two_lanes_equal_one_lane_bit_for_bit(two_threads):
    LSTM_MODE["mode"] = "per_model"
    try:
        n, b, t, i, h = 4, 8, 12, 5, 16
        torch.manual_seed(0)
        lstms = [nn.LSTM(i, h, batch_first=True) for _ in range(n)]
        skeleton = VmapLSTM(copy.deepcopy(lstms[0]).to("meta"))
        x = torch.randn(n, b, t, i)
        runs = []
        for threads in (2, 1):
            torch.set_num_threads(threads)
            params = {k: v.detach().requires_grad_() for k, v in stack_module_state(lstms)[0].items()}
            xx = x.clone().requires_grad_()
            out = vmap(lambda p, a: functional_call(skeleton, p, (a,))[0])(params, xx)
            runs.append([out, *torch.autograd.grad(out.square().sum(), [xx, *params.values()])])
        assert all(torch.equal(a, c) for a, c in zip(*runs, strict=True))  # each model single-threaded either way
    finally:
        LSTM_MODE["mode"] = "auto"


def _lanes_in_child(q) -> None:
    q.put(per_model(lambda i: i + 1, 4, torch.device("cpu")))


def test_lanes_work_in_a_forked_child(two_threads):
    """A forked process inherits the helper pool's object but none of its threads: it makes its own."""
    assert per_model(lambda i: i, 4, torch.device("cpu")) == [0, 1, 2, 3]  # the pool exists in this process
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    child = ctx.Process(target=_lanes_in_child, args=(q,))
    child.start()
    child.join(60)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive and child.exitcode == 0 and q.get(timeout=5) == [1, 2, 3, 4]
