"""The memory model (measured on the real model) and the throughput probe that size packs."""

from __future__ import annotations

import pytest
from sweep_fixtures import config

from stride.config.errors import ConfigError
from stride.data.build import build_data
from stride.models.registry import build_model
from stride.sweep.sizing import SAFETY, USABLE, MemoryModel, check_fits, memory_model, probe

MIB = 2**20


def test_memory_model_counts_state_activations_and_batch():
    cfg = config("mlp")
    mem = memory_model(cfg)
    data = build_data(cfg.data, 32)
    params = sum(p.numel() for p in build_model(cfg.model, data.n_features, 16, 2).parameters())
    assert mem.state_bytes == params * 4 * 4  # fp32 parameter, gradient and AdamW's two moments
    assert mem.activation_bytes > 32 * 128 * 4  # at least one [batch, width] fp32 activation is kept
    assert mem.batch_bytes == 32 * 16 * data.n_features * 4 + 32 * 2 * 4
    assert mem.per_model == int(SAFETY * (mem.state_bytes + mem.activation_bytes + mem.batch_bytes))
    assert mem.max_models() >= 1 and mem.available_bytes > 0


def test_a_pack_that_does_not_fit_is_one_clear_line():
    cfg = config("mlp")
    mem = memory_model(cfg)
    assert check_fits(cfg, 1, mem) == (mem, 1)
    n = mem.max_models(1) + 1  # not even one model at a time leaves room for this many models' state
    with pytest.raises(ConfigError, match=rf"--pack {n} does not fit in memory even one model at a time: a pack") as e:
        check_fits(cfg, n, mem)
    assert "\n" not in str(e.value) and f"use --pack {n - 1}" in str(e.value)


def _mem(state_mib: float, act_mib: float, usable_mib: float) -> MemoryModel:
    """A memory model with round figures (no batch), `usable_mib` of which a pack may use after the margin."""
    return MemoryModel(int(state_mib * MIB), int(act_mib * MIB), 0, int(usable_mib * SAFETY * MIB / USABLE) + 64)


def test_a_pack_counts_every_models_state_and_one_chunks_activations():
    mem = _mem(state_mib=1, act_mib=10, usable_mib=100)
    assert mem.need(16, 4) == int(SAFETY * (16 * 1 + 4 * 10) * MIB)
    assert mem.need(4, 16) == mem.need(4, 4)  # a chunk is never larger than its pack
    assert mem.max_chunk(16) == 8  # 16 + 8 x 10 <= 100 < 16 + 9 x 10
    assert mem.max_chunk(95) == 0  # 95 states leave less than one model's activations
    assert mem.max_models() == 9  # the whole pack at once: 9 x 11 <= 100
    assert mem.max_models(4) == 60  # 60 x 1 + 4 x 10 <= 100
    assert mem.max_models(16) == 9  # a chunk of 16 does not fit: packs up to 9, each one chunk


def test_a_pack_too_large_for_its_default_chunk_trains_in_chunks_that_fit():
    cfg = config("mlp")  # on the CPU: 16 models a step by default
    mem = _mem(state_mib=1, act_mib=10, usable_mib=100)
    assert check_fits(cfg, 4, mem) == (mem, 4)  # all at once fits: the default
    assert check_fits(cfg, 16, mem)[1] == 8  # 16 at once would need 176 MiB: chunks of 8 fit
    assert check_fits(cfg, 32, mem)[1] == 6  # the rest after 32 states: 68 MiB, six models' activations
    assert check_fits(cfg, 16, mem, chunk=5)[1] == 5  # a chunk that fits is kept as given


def test_a_chunk_that_does_not_fit_is_one_line_naming_the_figures():
    cfg = config("mlp")
    mem = _mem(state_mib=1, act_mib=10, usable_mib=100)
    with pytest.raises(ConfigError) as e:
        check_fits(cfg, 16, mem, chunk=12)
    msg = str(e.value)
    assert msg.startswith("--pack 16 --chunk 12 does not fit in memory: a pack of 16 in chunks of 12 needs about")
    assert "16 x state 1.0 MiB + 12 x (activations 10.0 MiB" in msg and msg.endswith("use --chunk 8 or --chunk auto")
    assert "\n" not in msg
    with pytest.raises(ConfigError, match=r"--pack 120 does not fit in memory even one model at a time: .* use --pack "
                                          r"90 or --pack auto$"):
        check_fits(cfg, 120, mem)  # 120 states are over 100 MiB whatever the chunk; 90 + 10 fit


def test_probe_measures_packs_and_picks_a_measured_size():
    cfg = config("mlp")
    pr = probe(cfg, max_n=4, budget_s=60, timed_steps=2)
    assert pr.solo_samples_per_s > 0 and 2 in pr.packed and all(v > 0 for v in pr.packed.values())
    assert pr.size == 1 or pr.size in pr.packed  # a size it measured, or none (alone) when no pack beat it
    assert set(pr.ratios) == {1, *pr.packed} and pr.ratios[1] == 1.0
    if pr.size > 1:
        assert pr.ratios[pr.size] >= 1.05 and pr.ratios[pr.size] == max(pr.ratios.values())
    assert "chose" in pr.why
    # the figure the memory model allows, not a method's repr (it printed "<bound method ...>")
    assert f"memory allows up to {pr.memory.max_models(1):,} models;" in pr.why and "<" not in pr.why
