"""A pack trained chunk by chunk (a few of its models at a time) still equals each model's solo run.

Chunks bound a pack's activations to a chunk's (`PackedTrainer(chunk=K)`); these packs force small chunks
on tiny models so that every path runs: chunks of unequal sizes, per-model data orders, a chunk whose
models all stopped (skipped).
"""

from __future__ import annotations

import pytest
import torch
from sweep_fixtures import config, max_param_diff, solo_on_tensors, tensor_data

from stride.sweep.packed_model import CPU_CHUNK, chunk_bounds, default_chunk
from stride.sweep.packed_train import PackedTrainer

FP64_TOL = 1e-10


def test_a_pack_in_chunks_of_unequal_size_equals_solo_float64():
    workload = "mlp"
    cfgs = [config(workload, "train.seed=0"), config(workload, "train.seed=1", "train.grad_clip=0.05"),
            config(workload, "train.seed=0", "optim.lr=3e-3", "optim.weight_decay=0.1")]
    train, val = tensor_data(cfgs[0], 256, 0, torch.float64), tensor_data(cfgs[0], 64, 1, torch.float64)
    pt = PackedTrainer(cfgs, train_data=train, val_data=val, dtype=torch.float64, chunk=2)
    assert [(c.lo, c.hi) for c in pt.chunks] == [(0, 1), (1, 3)]
    pt.fit()
    for i, c in enumerate(cfgs):
        ref = solo_on_tensors(c, train, val, torch.float64)
        assert max_param_diff(ref.model.state_dict(), pt.model.state_dict_of(i)) < FP64_TOL, i
        got, want = ([h.get("val_loss") for h in hist] for hist in (pt.records[i].history, ref.history))
        # the steps without validation hold None: compared as such (pytest 9.2's approx refuses None)
        assert [v is None for v in got] == [v is None for v in want], i
        assert [v for v in got if v is not None] == pytest.approx([v for v in want if v is not None], rel=1e-10)


def test_a_chunk_whose_models_stopped_is_skipped_and_the_others_go_on():
    """Chunks of one LSTM each (what a CPU runs for models larger than its cache); model 0 stops at step 2."""
    cfgs = [config("lstm", "train.steps=2"), config("lstm", "train.seed=1", "train.steps=5")]
    train, val = tensor_data(cfgs[0], 256, 0, torch.float64), tensor_data(cfgs[0], 64, 1, torch.float64)
    pt = PackedTrainer(cfgs, train_data=train, val_data=val, dtype=torch.float64, chunk=1)
    pt.fit()
    assert [pt.records[i].summary["steps"] for i in (0, 1)] == [2, 5]
    for i, c in enumerate(cfgs):
        ref = solo_on_tensors(c, train, val, torch.float64)
        assert max_param_diff(ref.model.state_dict(), pt.model.state_dict_of(i)) < FP64_TOL, i


def test_chunk_bounds_cover_the_pack_in_nearly_equal_chunks():
    for n in (1, 5, 16, 17, 64):
        for size in (1, 3, 4, 16, 100):
            bounds = chunk_bounds(n, size)
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
            sizes = [hi - lo for lo, hi in bounds]
            assert max(sizes) <= max(1, min(size, n)) and max(sizes) - min(sizes) <= 1


def test_the_default_chunk_is_the_whole_pack_on_a_gpu_and_at_most_16_models_on_a_cpu():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert CPU_CHUNK == 16
    assert [default_chunk(n, cpu) for n in (1, 8, 16, 17, 64)] == [1, 8, 16, 16, 16]
    assert default_chunk(64, gpu) == 64
    assert [hi - lo for lo, hi in chunk_bounds(64, default_chunk(64, cpu))] == [16] * 4
