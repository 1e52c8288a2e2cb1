"""The loader probe counts a rank's share of the cores (review of 2026-12-07): two unpinned ranks of 1 torch thread on
2 cores each saw a free core for a prefetch thread and gather helpers, which did not exist."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from data_fixtures import write_parquet_dataset  # noqa: E402

from stride.config import load_config  # noqa: E402
from stride.data import probe  # noqa: E402
from stride.data.build import build_data  # noqa: E402
from stride.data.ingest import ingest  # noqa: E402
from stride.files.rank_share import PINNED_APART_ENV  # noqa: E402

affinity = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                              reason="needs a CPU affinity of 2 cores or more")


@affinity
def test_local_ranks_share_the_cores_unless_pinned_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    cores = len(os.sched_getaffinity(0))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv(PINNED_APART_ENV, raising=False)
    assert probe.usable_cores() == cores  # alone on its cores
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert probe.usable_cores() == cores // 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(cores * 4))
    assert probe.usable_cores() == 1  # more ranks than cores: still one (the step's own)
    monkeypatch.setenv(PINNED_APART_ENV, "1")  # each rank's affinity is its own cores
    assert probe.usable_cores() == cores
    assert probe.rank_share.PINNED_APART_ENV == PINNED_APART_ENV  # the data layer reads the rule the pinning sets


@affinity
def test_two_unpinned_ranks_of_one_thread_on_two_cores_get_no_helper_threads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_parquet_dataset(tmp_path / "src", n_days=2, per_day=80)
    store = ingest(tmp_path / "src", tmp_path / "store")
    cfg = load_config(overrides=['data.source="store"', f'data.store="{store}"', "data.seq_len=8",
                                 "data.horizons=[1, 3]", "data.val_fraction=0.3", "train.batch_size=16"])
    source = build_data(replace(cfg.data, prefetch=0, gather_threads=1), 16).train.source
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.delenv(PINNED_APART_ENV, raising=False)
    before, threads = os.sched_getaffinity(0), torch.get_num_threads()
    os.sched_setaffinity(0, sorted(before)[:2])
    try:
        torch.set_num_threads(1)
        plan = probe.measure(source, 16, torch.device("cpu"))
    finally:
        torch.set_num_threads(threads)
        os.sched_setaffinity(0, before)
    assert plan.prefetch == 0 and plan.reasons["prefetch"].startswith("0: no core is free"), plan.reasons
    assert plan.gather_threads == 1 and "gather_threads_wall_ms" not in plan.figures, plan.figures
