"""Tracing stride workloads on fake tensors against measurements on real CPU tensors.

For every supervised bench workload (shrunk to a micro-batch of 4): the traced FLOPs equal
FlopCounterMode's count of a real forward + loss + backward (total and per layer), and the traced
saved-for-backward bytes per layer equal what autograd saves on real tensors, measured here with
`saved_tensors_hooks` and module hooks, independently of the trace's own accounting.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from stride.bench.workloads import WORKLOADS
from stride.config import load_config
from stride.data.build import build_data
from stride.models.losses import make_loss
from stride.models.registry import build_model
from stride.perfmodel.census import OUTSIDE
from stride.perfmodel.census_ops import flop_mapping
from stride.perfmodel.census_step import take_census
from stride.perfmodel.census_workload import census_inputs
from stride.perfmodel.workload_cost import interpolate
from stride.train.precision import Precision

SUPERVISED = [n for n, w in WORKLOADS.items() if w.kind == "supervised"]
MICRO = 4


def _cfg(name: str):
    return load_config(overrides=[*WORKLOADS[name].overrides, "data.n_steps=2048"])


def _real_reference(cfg, micro: int):
    """(total FLOPs, FLOPs per layer, saved bytes per layer by kind) of one real micro-step."""
    t, m = cfg.train, cfg.model
    bundle = build_data(cfg.data, t.batch_size)
    x, y = next(iter(bundle.train))
    x, y = x[:micro].clone(), y[:micro].clone()  # a storage of its own, as the trace's input
    torch.manual_seed(0)
    model = build_model(m, bundle.n_features, bundle.seq_len, bundle.n_horizons)
    loss_fn = getattr(model, "loss", None) or make_loss(m.loss, huber_delta=m.huber_delta, quantiles=m.quantiles)
    blocks = getattr(model, "blocks", None)
    current = [OUTSIDE]
    layers: dict[str, nn.Module] = {}
    for name, child in model.named_children():
        if name == "blocks" and isinstance(child, nn.ModuleList):
            layers.update({f"blocks.{i}": b for i, b in enumerate(child)})
        else:
            layers[name] = child
    for lname, mod in layers.items():
        mod.register_forward_pre_hook(lambda mod, args, lname=lname: current.__setitem__(0, lname))
        mod.register_forward_hook(lambda mod, args, out: current.__setitem__(0, OUTSIDE))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    buffers = {b.untyped_storage().data_ptr() for b in model.buffers()}
    saved: dict[str, dict[str, int]] = {}
    seen: set[int] = set()

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        # the trainer's rule (SavedActivations): skip Parameter objects, each other storage once
        if not isinstance(tensor, nn.Parameter):
            st = tensor.untyped_storage()
            if st.data_ptr() not in seen:
                seen.add(st.data_ptr())
                kind = "param" if st.data_ptr() in params else "buffer" if st.data_ptr() in buffers else "act"
                d = saved.setdefault(current[0], {"act": 0, "param": 0, "buffer": 0})
                d[kind] += st.nbytes()
        return tensor

    prec = Precision(t.precision, torch.device("cpu"))
    with FlopCounterMode(display=False, custom_mapping=flop_mapping()) as fc:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t_: t_), prec.autocast():
            loss = loss_fn(model(x), y)
        loss.backward()
    del blocks
    counts = fc.get_flop_counts()
    root = type(model).__name__
    per_layer = {k: int(sum(counts.get(f"{root}.{k}", {}).values())) for k in layers}
    return fc.get_total_flops(), per_layer, saved


@pytest.mark.parametrize("name", SUPERVISED)
def test_traced_flops_and_saved_bytes_match_real_tensors(name: str) -> None:
    cfg = _cfg(name)
    tr = take_census(census_inputs(cfg, MICRO, name))
    total, per_layer, saved = _real_reference(cfg, MICRO)
    assert tr.flops == total > 0
    assert tr.flop_counter_total == total
    for la in tr.layers:
        if la.name != OUTSIDE:
            assert la.flops == per_layer[la.name], la.name
        ref = saved.get(la.name, {"act": 0, "param": 0, "buffer": 0})
        assert (la.saved_bytes, la.saved_param_bytes, la.saved_buffer_bytes) == (
            ref["act"], ref["param"], ref["buffer"]), la.name
    assert tr.saved_bytes > 0 and tr.param_count == sum(la.params for la in tr.layers)


def test_attention_flops_are_counted_on_cpu() -> None:
    """torch 2.13's counter has no entry for CPU flash attention; the trace adds torch's own formula."""
    cfg = _cfg("ts_transformer_tiny")
    tr = take_census(census_inputs(cfg, MICRO))
    attn = sum(la.fwd.attn_flops for la in tr.blocks())
    b, s, d, layers = MICRO, 64, 64, 2
    assert attn == layers * 4 * b * s * s * d  # QK^T and AV, 2 FLOPs per multiply-add, full square
    assert sum(la.fwd.attn_exec_flops for la in tr.blocks()) == attn / 2  # causal: the kernel skips half


@pytest.mark.parametrize("name", ["ts_transformer_tiny", "lstm_small"])
def test_interpolated_trace_matches_a_direct_trace(name: str) -> None:
    cfg = _cfg(name)
    a, b, mid = (take_census(census_inputs(cfg, n)) for n in (2, 8, 4))
    got = interpolate(a, b, 4)
    assert got.flops == pytest.approx(mid.flops, rel=1e-12)
    # oneDNN pads its RNN workspace to pages (and sizes it by the thread count): affine in batch to
    # within a few pages; everything else exactly. Kernels and bytes are compared in total: in
    # backward, torch's module tracker may credit an op at a block's edge to either neighbour.
    pad = 64 * 1024 if name.startswith("lstm") else 0
    tot = lambda t, f: sum(f(la) for la in t.layers)  # noqa: E731
    assert tot(got, lambda la: la.fwd.bytes + la.bwd.bytes) == pytest.approx(
        tot(mid, lambda la: la.fwd.bytes + la.bwd.bytes), rel=1e-9, abs=3 * pad)
    # (+-1 kernel: an aten op that is a no-op copy at one batch size, e.g. a contiguous() of a view)
    assert tot(got, lambda la: la.fwd.kernels + la.bwd.kernels) == pytest.approx(
        tot(mid, lambda la: la.fwd.kernels + la.bwd.kernels), abs=1)
    for g, r in zip(got.layers, mid.layers, strict=True):
        assert g.saved_bytes == pytest.approx(r.saved_bytes, rel=1e-9, abs=pad)


def test_optimizer_trace_counts_state_and_kernels() -> None:
    cfg = load_config(overrides=[*WORKLOADS["mlp_tiny"].overrides, "data.n_steps=2048"])
    tr = take_census(census_inputs(cfg, MICRO))
    n_tensors = 2 + 2 * 6 + 2 + 2  # inp, 2 blocks x (norm w, b, fc1 w, b, fc2 w, b), norm, head
    # AdamW: exp_avg and exp_avg_sq of every parameter, and a one-element fp32 step per tensor
    assert tr.optimizer_state_bytes == 2 * tr.param_bytes + 4 * n_tensors
    assert 0 < tr.optimizer.kernels < 30  # foreach clip + one fused AdamW kernel, not per tensor
    assert tr.optimizer.bytes >= 7 * tr.param_bytes  # reads p, g, m, v; writes p, m, v (at least)
