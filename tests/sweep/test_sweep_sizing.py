"""The memory model (measured on the real model) and the throughput probe that size packs."""

from __future__ import annotations

import pytest
from sweep_fixtures import config

from stride.config.errors import ConfigError
from stride.data.build import build_data
from stride.models.registry import build_model
from stride.sweep.sizing import SAFETY, check_fits, memory_model, probe


def test_memory_model_counts_state_activations_and_batch():
    cfg = config("mlp")
    mem = memory_model(cfg)
    data = build_data(cfg.data, 32)
    params = sum(p.numel() for p in build_model(cfg.model, data.n_features, 16, 2).parameters())
    assert mem.state_bytes == params * 4 * 4  # fp32 parameter, gradient and AdamW's two moments
    assert mem.activation_bytes > 32 * 128 * 4  # at least one [batch, width] fp32 activation is kept
    assert mem.batch_bytes == 32 * 16 * data.n_features * 4 + 32 * 2 * 4
    assert mem.per_model == int(SAFETY * (mem.state_bytes + mem.activation_bytes + mem.batch_bytes))
    assert mem.max_models >= 1 and mem.available_bytes > 0


def test_a_pack_that_does_not_fit_is_one_clear_line():
    cfg = config("mlp")
    mem = memory_model(cfg)
    check_fits(cfg, 1, mem)
    with pytest.raises(ConfigError, match=rf"--pack {mem.max_models + 1} does not fit in memory: a pack of") as e:
        check_fits(cfg, mem.max_models + 1, mem)
    assert "\n" not in str(e.value) and f"use --pack {mem.max_models}" in str(e.value)


def test_probe_measures_packs_and_picks_a_measured_size():
    cfg = config("mlp")
    pr = probe(cfg, max_n=4, budget_s=60, timed_steps=2)
    assert pr.solo_samples_per_s > 0 and 2 in pr.packed and all(v > 0 for v in pr.packed.values())
    assert pr.size == 1 or pr.size in pr.packed  # a size it measured, or none (alone) when no pack beat it
    assert set(pr.ratios) == {1, *pr.packed} and pr.ratios[1] == 1.0
    if pr.size > 1:
        assert pr.ratios[pr.size] >= 1.05 and pr.ratios[pr.size] == max(pr.ratios.values())
    assert "chose" in pr.why
