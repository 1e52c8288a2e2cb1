"""An impossible [parallel] layout is a ConfigError before any process group exists."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from stride.config import ConfigError, load_config
from stride.parallel.comm_hooks import CommTimer
from stride.parallel.layout import resolve_layout
from stride.train.trainer import Trainer

BASE = ["model.d_model=32", "model.n_layers=2", "model.n_heads=4", "data.n_assets=4", "data.n_steps=600",
        "data.seq_len=16", "train.batch_size=8", "train.threads=1", "metrics.progress=false"]


def _trainer(monkeypatch, world: int, *overrides: str) -> Trainer:
    monkeypatch.setenv("WORLD_SIZE", str(world))
    return Trainer(config=load_config(overrides=BASE + list(overrides)), write_run_dir=False)


@pytest.mark.parametrize(
    ("world", "overrides", "message"),
    [
        (4, ["parallel.dp_shard=3"], "multiply to 3, but the world size is 4"),
        (3, ["parallel.tp=3"], "`model.n_heads` = 4 is not divisible by `parallel.tp` = 3"),
        (4, ["parallel.pp=4"], "makes 4 pipeline stages, but the model has only 2 layers"),
        (2, ["parallel.dp_shard=2", "train.batch_size=6", "train.grad_accum=2"], "multiple of 4"),
        (4, ["parallel.dp_replicate=2", "parallel.tp=2"], "DDP does not take tensor-parallel"),
        (2, ["parallel.tp=2", "data.seq_len=15"], "sequence parallel splits the 15 tokens"),
    ],
)
def test_impossible_layout_fails_before_process_groups(monkeypatch, world, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        _trainer(monkeypatch, world, *overrides)
    assert not dist.is_initialized()


def test_all_ones_under_a_launcher_means_ddp():
    layout = resolve_layout(load_config().parallel, 4)
    assert (layout.dp_replicate, layout.dp, layout.strategy) == (4, 4, "ddp")
    assert resolve_layout(load_config(overrides=["parallel.dp_shard=2", "parallel.tp=2"]).parallel, 4).strategy \
        == "fsdp+tp"


def test_bad_parallel_values_name_the_key():
    with pytest.raises(ConfigError, match="parallel.comm_hook"):
        load_config(overrides=["parallel.comm_hook='int8'"])
    with pytest.raises(ConfigError, match="DDP hook but `parallel.dp_shard` = 2"):
        load_config(overrides=["parallel.comm_hook='fp16'", "parallel.dp_shard=2"])


def test_comm_timer_splits_exposed_from_hidden():
    timer = CommTimer()
    # buckets launched at 0.0 and 1.0 (compute ends at 1.0); they finish at 0.5 and 1.3
    timer.spans = [[0.0, 0.5], [1.0, 1.3]]
    exposed, hidden = timer.split()
    assert exposed == pytest.approx(0.3) and hidden == pytest.approx(0.5)
    # an early bucket still running after the last launch: overlap counted once
    timer.spans = [[0.0, 1.2], [1.0, 1.5]]
    exposed, hidden = timer.split()
    assert exposed == pytest.approx(0.5) and hidden == pytest.approx(1.0)
