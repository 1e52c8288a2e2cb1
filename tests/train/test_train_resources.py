"""A config that cannot fit is refused before anything is built; seeds are checked; oversubscribed threads warned.

Audit findings: `model.d_model = 100000000` crashed in torch's allocator (4e16 bytes), `model.n_layers = 100000`
built for minutes, `data.n_assets = data.n_steps = 100000` crashed in NumPy (74.5 GiB), each with a traceback;
`data.seed = -1` and `train.seed = 99999999999999999999` crashed in NumPy / torch; `train.threads = 1000` on 2
cores ran silently at 0.06 % MFU. Nothing here allocates more than a tiny model or a small synthetic market.
"""

from __future__ import annotations

import logging
import time
import tracemalloc
from pathlib import Path

import pytest
import torch

from stride.config import ConfigError, load_config
from stride.config.schema import ModelConfig
from stride.data.synthetic import forward_targets, generate_market, market_bytes
from stride.files.rank_share import PINNED_APART_ENV
from stride.models.registry import WORKLOADS, build_model
from stride.models.size import model_size
from stride.train import resources as mem

GiB = 2**30
QUICK = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.toml")


@pytest.fixture
def host_16g(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host with 16 GiB available, whatever this machine has: the verdicts below do not depend on it."""
    monkeypatch.setattr(mem, "host_available", lambda: 16 * GiB)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)


# -- seeds -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["data.seed", "train.seed"])
@pytest.mark.parametrize("value", ["-1", "99999999999999999999", str(2**63)])
def test_seed_outside_range_is_an_error_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=rf"`{key}` = {value} must be in \[0, {2**63 - 1}\]"):
        load_config(QUICK, [f"{key}={value}"])


@pytest.mark.parametrize("key", ["data.seed", "train.seed"])
def test_seed_edges_are_accepted(key: str) -> None:
    for value in (0, 2**63 - 1):
        cfg = load_config(QUICK, [f"{key}={value}"])
        assert getattr(cfg, key.split(".")[0]).seed == value


def test_largest_seed_orders_batches() -> None:
    """data.seed = 2**63 - 1 is accepted, so the loaders must take it: seed x 1_000_003 overflowed torch's seed."""
    from stride.data.loader import ShardedLoader
    from stride.data.tensor_batches import TensorBatches
    from stride.data.windows import ArrayWindows, window_ends

    feats, tgt = torch.randn(2, 40, 3), torch.randn(2, 40, 1)
    big = 2**63 - 1
    x, _ = next(iter(ShardedLoader(ArrayWindows(feats, tgt, window_ends(2, 4, 30), 5), 4, seed=big, prefetch=0)))
    assert x.shape == (4, 5, 3)
    x, _ = next(iter(TensorBatches(torch.randn(16, 3), torch.randn(16, 1), 4, seed=big)))
    assert x.shape == (4, 3)
    # seeds that fitted before keep their order (the fold to 2**64 leaves them alone)
    small = ShardedLoader(ArrayWindows(feats, tgt, window_ends(2, 4, 30), 5), 4, seed=7, prefetch=0)
    n = len(small.source)
    before = torch.randperm(n, generator=torch.Generator().manual_seed(7 * 1_000_003), dtype=torch.int32)
    assert small._positions(0, 0, n, n).tolist() == before.tolist()


# -- sizes, known before anything is built ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(WORKLOADS))
@pytest.mark.parametrize("n_layers", [None, 3, 11])
def test_model_size_matches_the_built_model(name: str, n_layers: int | None) -> None:
    """Counted on meta (11 layers: from builds of 1 and 2) as the real build has them."""
    cfg = ModelConfig(name=name, n_layers=n_layers)
    # 11 tcn blocks are dilated up to 1024 steps: a 32-step window is refused (blocks that see only padding)
    seq = 2048 if name == "tcn" and n_layers == 11 else 32
    size = model_size(cfg, 7, seq, 3)
    model = build_model(cfg, 7, seq, 3)
    assert size is not None
    assert size.params == sum(p.numel() for p in model.parameters())
    assert size.param_bytes == sum(p.numel() * p.element_size() for p in model.parameters())
    assert size.buffer_bytes == sum(b.numel() * b.element_size() for b in model.buffers())


def test_model_size_refuses_deep_tcn_blocks_as_the_build_does() -> None:
    """11 tcn blocks on a 32-step window: counted from builds of 1 and 2 blocks, the size check returned 68,643
    parameters for a model the build refuses, so `stride train --nproc` launched its ranks to have each refuse it."""
    cfg = ModelConfig(name="tcn", n_layers=11)
    with pytest.raises(ConfigError) as built:
        build_model(cfg, 7, 32, 3)
    with pytest.raises(ConfigError) as sized:
        model_size(cfg, 7, 32, 3)
    assert str(sized.value) == str(built.value)
    assert "`model.n_layers` = 11 tcn blocks" in str(sized.value) and "`data.seq_len` = 32" in str(sized.value)
    assert model_size(ModelConfig(name="tcn", n_layers=11), 7, 1025, 3) is not None  # 2^10 < 1025: builds


def test_model_size_of_a_factory_model_is_unknown() -> None:
    assert model_size(ModelConfig(name="some.module:factory"), 7, 32, 3) is None


def test_market_bytes_is_a_close_floor_of_the_generation_peak() -> None:
    a, n = 4, 20000
    tracemalloc.start()
    try:
        series = generate_market(a, n, 0)
        forward_targets(series.returns, [1, 5, 20], series.vol)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    est = market_bytes(a, n, 3)[0]
    assert 0.7 * peak <= est <= 1.05 * peak, (est, peak)


# -- refusals ------------------------------------------------------------------------------------------------------


def _refusal(overrides: list[str], **kw) -> str:
    cfg = load_config(QUICK, overrides)
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        mem.check_resources(cfg, kw.pop("device", "cpu"), **kw)
    assert time.perf_counter() - t0 < 10  # measured, not built: 100000 layers took minutes to build
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_huge_d_model_is_refused_naming_the_key_estimate_and_limit(host_16g: None) -> None:
    msg = _refusal(["model.d_model=100000000"])
    assert "`model.d_model` = 100000000" in msg
    assert "EiB of host memory" in msg and "16 GiB available" in msg
    assert "2.4e+17 parameters" in msg and "`optim.name` = 'adamw'" in msg
    assert msg.endswith("lower `model.d_model`")


def test_many_layers_are_refused_quickly(host_16g: None) -> None:
    msg = _refusal(["model.n_layers=100000"])
    assert "`model.n_layers` = 100000" in msg and "72.7 GiB of host memory" in msg and "16 GiB available" in msg


def test_huge_synthetic_market_is_refused_naming_its_keys(host_16g: None) -> None:
    msg = _refusal(["data.n_assets=100000", "data.n_steps=100000"])
    assert "`data.n_assets` = 100000 x `data.n_steps` = 100000" in msg
    assert "1.42 TiB" in msg and "16 GiB available" in msg
    assert "lower `data.n_assets` or `data.n_steps`" in msg and "model" not in msg.split("available")[1]


def test_quickstart_fits_and_is_estimated(host_16g: None) -> None:
    est = mem.check_resources(load_config(QUICK), "cpu")
    assert est.params == sum(p.numel() for p in build_model(ModelConfig(), 7, 64, 3).parameters())
    assert est.per_param == 16  # fp32 weights, gradients, AdamW's two moments
    assert est.data_peak == market_bytes(8, 8192, 3)[0]
    assert est.host_bytes < 64 * 2**20


def test_processes_on_the_host_multiply_its_need(host_16g: None) -> None:
    cfg = load_config(QUICK, ["model.n_layers=15000"])  # 7.3e8 parameters: 10.9 GiB to train on the CPU
    one = mem.check_resources(cfg, "cpu", ranks_here=1)
    assert one.host_bytes < 16 * GiB
    msg = _refusal(["model.n_layers=15000"], ranks_here=2)
    assert "for the 2 processes on this host" in msg


def test_sharding_divides_the_training_state(host_16g: None) -> None:
    cfg = load_config(QUICK, ["model.n_layers=30000", "parallel.dp_shard=4"])
    est = mem.estimate_memory(cfg, "cpu", ranks_here=1)
    assert est.train_bytes == pytest.approx(est.params * 16 / 4, rel=0.01)
    assert est.host_model_bytes == est.model_bytes  # built whole before it is sharded


def test_optimizer_state_per_parameter() -> None:
    cfg = load_config(QUICK)
    for name, want in (("adamw", 8), ("adamw_triton", 8), ("adamw8bit", 2), ("adafactor", 2), ("sgd", 4)):
        cfg.optim.name = name
        assert mem.optimizer_state_bytes(cfg.optim) == want
    cfg.optim.momentum = 0.0
    assert mem.optimizer_state_bytes(cfg.optim) == 0


def test_a_cuda_run_is_checked_against_the_device(host_16g: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The device's free memory holds the model and its training state; the host only builds the model."""
    monkeypatch.setattr(mem, "device_available", lambda device: 10 * GiB)
    cfg = load_config(QUICK, ["model.n_layers=20000"])  # 9.8e8 parameters: 3.6 GiB built, 14.5 GiB trained
    est = mem.estimate_memory(cfg, "cuda:0", ranks_here=1)
    assert est.on_device and est.host_model_bytes == est.model_bytes
    assert est.host_bytes < 16 * GiB and est.device_bytes > 10 * GiB  # the host fits, the device does not
    msg = _refusal(["model.n_layers=20000"], device="cuda:0")
    assert "of memory on cuda:0" in msg and "10 GiB free" in msg and "`model.n_layers` = 20000" in msg


def test_parts_the_caller_brings_are_not_counted(host_16g: None) -> None:
    cfg = load_config(QUICK, ["model.d_model=100000000", "data.n_assets=100000", "data.n_steps=100000"])
    est = mem.check_resources(cfg, "cpu", model=False, data=False)  # a Trainer given its model and data
    assert est.params is None and est.host_bytes == 0


def test_a_factory_model_is_not_built_to_be_measured(host_16g: None) -> None:
    cfg = load_config(QUICK, ["model.name=no_such_module_xyz:factory"])
    est = mem.check_resources(cfg, "cpu")
    assert est.params is None and est.data_peak > 0


# -- threads -------------------------------------------------------------------------------------------------------


def test_threads_above_the_usable_cores_warn(host_16g: None, monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(mem, "usable_cores", lambda: 2)
    monkeypatch.setattr(mem, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="stride.config"):
        mem.check_resources(load_config(QUICK, ["train.threads=1000"]), "cpu")  # a warning, not an error
        mem.check_resources(load_config(QUICK, ["train.threads=1000"]), "cpu")  # said once a process
    (record,) = [r for r in caplog.records if r.name == "stride.config"]
    assert "`train.threads` = 1000" in record.getMessage() and "the 2 usable cores" in record.getMessage()
    assert "\n" not in record.getMessage()


def test_threads_within_the_cores_or_unset_do_not_warn(host_16g: None, monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(mem, "usable_cores", lambda: 2)
    with caplog.at_level(logging.WARNING, logger="stride.config"):
        mem.check_resources(load_config(QUICK, ["train.threads=2"]), "cpu")
        mem.check_resources(load_config(QUICK), "cpu")
    assert not [r for r in caplog.records if r.name == "stride.config"]


def test_threads_times_processes_on_the_host_warn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mem, "usable_cores", lambda: 4)
    monkeypatch.delenv(PINNED_APART_ENV, raising=False)
    cfg = load_config(QUICK, ["train.threads=2"])
    assert mem.threads_warning(cfg, ranks_here=2) is None
    msg = mem.threads_warning(cfg, ranks_here=4)
    assert msg is not None and "x 4 processes on this host = 8 threads" in msg and "4 usable cores" in msg
    assert "`train.threads` <= 1" in msg


def test_ranks_pinned_a_core_each_do_not_warn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ranks pinned to a core each, one thread each: "1 x 2 processes = 2 threads exceeds the 1 usable cores"
    was said (stride plan's local runs); a rank pinned apart meets only its own cores. A smaller affinity alone (a
    container's cpuset, shared by every rank) still counts every rank's threads."""
    monkeypatch.setattr(mem, "usable_cores", lambda: 1)
    cfg1 = load_config(QUICK, ["train.threads=1"])
    monkeypatch.delenv(PINNED_APART_ENV, raising=False)
    assert "x 4 processes on this host = 4 threads" in (mem.threads_warning(cfg1, ranks_here=4) or "")
    monkeypatch.setenv(PINNED_APART_ENV, "1")
    assert mem.threads_warning(cfg1, ranks_here=2) is None
    msg = mem.threads_warning(load_config(QUICK, ["train.threads=2"]), ranks_here=2)
    assert msg is not None and "`train.threads` = 2 exceeds the 1 usable cores" in msg
