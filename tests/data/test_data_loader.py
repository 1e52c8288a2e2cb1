"""Sharding, exact mid-epoch resume (also on a new world size), prefetch equivalence, trainer on a store."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from data_fixtures import Ids, write_parquet_dataset  # noqa: E402

from stride.data.loader import ShardedLoader  # noqa: E402


def _ranks(n: int, b: int, world: int, state: dict | None = None, prefetch: int = 0) -> list[ShardedLoader]:
    out = []
    for r in range(world):
        ld = ShardedLoader(Ids(n), b, seed=7, prefetch=prefetch).shard(r, world)
        if state is not None:
            ld.load_state_dict(state)
        out.append(ld)
    return out


def _global_steps(loaders: list[ShardedLoader], steps: int | None = None) -> list[torch.Tensor]:
    """Run all ranks in lock step (as data-parallel training does); each step's windows, rank order."""
    its = [iter(ld) for ld in loaders]
    out = []
    while steps is None or len(out) < steps:
        parts = [next(it, None) for it in its]
        if parts[0] is None:
            break
        out.append(torch.cat([p[0] for p in parts]))
    return out


def test_ranks_disjoint_and_union_is_the_global_batch() -> None:
    single = _global_steps(_ranks(103, 12, 1))
    split = _global_steps(_ranks(103, 12, 3))
    assert len(single) == len(split) == 8
    for a, b in zip(single, split, strict=True):
        assert torch.equal(a, b)  # rank r holds the r-th third of the same global batch
    seen = torch.cat(split)
    assert len(torch.unique(seen)) == len(seen) == 96


@pytest.mark.parametrize("new_world", [1, 2, 4])
def test_mid_epoch_resume_on_a_new_world_size(new_world: int) -> None:
    n, b = 200, 12
    full = _global_steps(_ranks(n, b, 3), None)  # uninterrupted, one epoch on 3 ranks
    first = _ranks(n, b, 3)
    done = _global_steps(first, 5)
    state = first[0].state_dict()
    assert state["position"] == 5 and all(ld.state_dict() == state for ld in first)
    rest = _global_steps(_ranks(n, b, new_world, state), None)
    resumed = done + rest
    assert len(resumed) == len(full)
    for a, c in zip(resumed, full, strict=True):
        assert torch.equal(a, c)
    seen = torch.cat(resumed)
    assert len(torch.unique(seen)) == len(seen) == (n // b) * b  # none skipped, none repeated


def test_epochs_reshuffle_and_stateless_validation_repeats() -> None:
    ld = ShardedLoader(Ids(50), 10, seed=1)
    e0 = torch.cat([x for x, _ in ld])
    e1 = torch.cat([x for x, _ in ld])
    assert ld.epoch == 2 and not torch.equal(e0, e1) and torch.equal(e0.sort().values, e1.sort().values)
    ld.set_epoch(0)
    assert torch.equal(torch.cat([x for x, _ in ld]), e0)  # (seed, epoch) fixes the order
    val = ShardedLoader(Ids(25), 10, shuffle=False, drop_last=False, stateful=False)
    assert [len(x) for x, _ in val] == [10, 10, 5] and torch.equal(torch.cat([x for x, _ in val]), torch.arange(25))


def test_prefetch_gives_the_same_batches_and_stops_its_thread() -> None:
    plain = _global_steps(_ranks(300, 8, 2))
    pre = _global_steps(_ranks(300, 8, 2, prefetch=3))
    assert all(torch.equal(a, b) for a, b in zip(plain, pre, strict=True)) and len(plain) == len(pre)
    def prefetchers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "stride-data-prefetch"}

    before = prefetchers()  # threads of other tests' loaders may still be winding down
    ld = ShardedLoader(Ids(300), 8, prefetch=2)
    it = iter(ld)
    next(it)
    next(it)
    assert ld.state_dict()["position"] == 2  # counted when consumed, not when prefetched
    assert prefetchers() - before  # this iterator's thread runs
    it.close()
    assert not prefetchers() - before  # and stops on close


def test_state_from_other_data_is_refused() -> None:
    ld = ShardedLoader(Ids(100), 10)
    with pytest.raises(ValueError, match="n_windows=90"):
        ld.load_state_dict({"epoch": 0, "position": 1, "seed": 0, "n_windows": 90, "batch_size": 10})
    with pytest.raises(ValueError, match="not divisible by world size 3"):
        ld.shard(0, 3)


def test_prefetch_thread_error_reaches_the_consumer() -> None:
    class Broken(Ids):
        def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            raise RuntimeError("disk gone")

    with pytest.raises(RuntimeError, match="disk gone"):
        next(iter(ShardedLoader(Broken(40), 8, prefetch=2)))


def test_trainer_trains_from_an_ingested_store(tmp_path: Path) -> None:
    from stride.config import load_config
    from stride.data.ingest import ingest
    from stride.train.trainer import Trainer

    write_parquet_dataset(tmp_path / "src", n_days=2, per_day=120)
    store = ingest(tmp_path / "src", tmp_path / "st")
    cfg = load_config(overrides=[
        'data.source="store"', f'data.store="{store}"', "data.seq_len=16", "data.horizons=[1, 5]",
        'data.normalize="expanding"', "train.batch_size=16", "train.steps=4", "train.val_every=2",
        "train.val_batches=2", "train.threads=1", "metrics.progress=false", "metrics.flops=false",
        "optim.warmup_steps=1",
    ])
    res = Trainer(config=cfg, out=str(tmp_path / "run")).fit()
    assert res.summary["steps"] == 4
    # targets are scaled to unit variance on the train split: an untrained model's MSE is about 1
    assert 0.3 < res.summary["final_train_loss"] < 3 and 0.3 < res.summary["final_val_loss"] < 3
    assert (tmp_path / "st" / "derived").is_dir()


@pytest.mark.parametrize("n", [1, 2, 5, 64, 1000, 4097])
def test_feistel_permutation_is_a_bijection(n: int) -> None:
    import numpy as np

    from stride.data.permutation import FeistelPermutation

    v = FeistelPermutation(n, 11)(np.arange(n))
    assert np.array_equal(np.sort(v), np.arange(n))
    if n >= 1000:  # not the identity, and another seed gives another order
        w = FeistelPermutation(n, 12)(np.arange(n))
        assert (v != np.arange(n)).mean() > 0.99 and (v != w).mean() > 0.99
        assert abs(np.corrcoef(np.arange(n), v)[0, 1]) < 0.1


def test_large_dataset_order_is_on_demand_and_resumes(monkeypatch: pytest.MonkeyPatch) -> None:
    import stride.data.loader as loader

    monkeypatch.setattr(loader, "RANDPERM_MAX", 100)  # treat 1000 windows as "large"
    monkeypatch.setattr(loader, "IDS_CHUNK", 3)
    full = _global_steps(_ranks(1000, 12, 2))
    seen = torch.cat(full)
    assert len(seen) == len(torch.unique(seen)) == 83 * 12
    first = _ranks(1000, 12, 2)
    done = _global_steps(first, 7)
    rest = _global_steps(_ranks(1000, 12, 3, first[0].state_dict()))
    assert all(torch.equal(a, b) for a, b in zip(done + rest, full, strict=True))
