"""bfloat16 batches (`data.batch_dtype`): each value is the float32 batch's value rounded, bit for bit;
targets stay float32 and equal; the trainer trains on them with precision fp32 (upcast) and bf16."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from data_fixtures import write_parquet_dataset  # noqa: E402

from stride.config import ConfigError, load_config  # noqa: E402
from stride.data.ingest import ingest  # noqa: E402
from stride.data.loader import ShardedLoader  # noqa: E402
from stride.data.splits import build_store_sources  # noqa: E402
from stride.data.windows import RowWindows  # noqa: E402


def _cfg(store: Path, *extra: str):  # noqa: ANN202
    base = ['data.source="store"', f'data.store="{store}"', "data.seq_len=8", "data.horizons=[1, 3]",
            "data.val_fraction=0.3"]
    return load_config(overrides=base + list(extra)).data


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bf16")
    write_parquet_dataset(root / "src", n_days=2, per_day=60)
    return {dt: ingest(root / "src", root / dt, dtype=dt) for dt in ("float32", "bfloat16")}


def _batches(src: RowWindows, n: int = 3) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return list(ShardedLoader(src, 16, seed=5))[:n]


@pytest.mark.parametrize("store_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("norm", ["none", "train", "expanding", "rolling"])
def test_bf16_batches_are_the_float32_batches_rounded(stores: dict[str, Path], store_dtype: str, norm: str) -> None:
    extra = [f'data.normalize="{norm}"'] + (["data.normalize_window=5"] if norm == "rolling" else [])
    cols = ['data.columns=["f2", "close"]'] if norm == "train" else []  # a column subset on one mode
    ref = build_store_sources(_cfg(stores[store_dtype], *extra, *cols))
    got = build_store_sources(_cfg(stores[store_dtype], *extra, *cols, 'data.batch_dtype="bfloat16"'))
    assert len(got.train) == len(ref.train) and len(got.val) == len(ref.val)
    for split in ("train", "val"):
        for (xr, yr), (xb, yb) in zip(_batches(getattr(ref, split)), _batches(getattr(got, split)), strict=True):
            assert xr.dtype == torch.float32 and xb.dtype == torch.bfloat16 and yb.dtype == torch.float32
            assert torch.equal(xb.view(torch.int16), xr.to(torch.bfloat16).view(torch.int16))
            assert torch.equal(yb, yr)
    if norm == "train":  # the train statistics are baked into the bf16 file: nothing applied after the gather
        assert got.train.shift is None and ref.train.shift is not None


def test_bf16_store_without_normalisation_is_read_in_place(stores: dict[str, Path]) -> None:
    from stride.data.store import open_store

    st = open_store(stores["bfloat16"])
    src = build_store_sources(_cfg(stores["bfloat16"], 'data.normalize="none"', 'data.batch_dtype="bfloat16"'), st)
    assert src.train.features.data_ptr() == st.values.data_ptr()  # the store's own memory map, no derived file
    assert not list(stores["bfloat16"].glob("derived/select-*.bf16"))
    x, _ = src.train.gather(torch.tensor([0, 5]))
    e = src.train.end_rows(torch.tensor([0, 5])).tolist()
    for b, end in enumerate(e):
        assert torch.equal(x[b].view(torch.int16), st.values[end - 7 : end + 1].view(torch.int16))


def test_bf16_batches_refuse_float32_rows_and_a_shift() -> None:
    rows = torch.randn(100, 3)
    price = torch.rand(100) + 1
    with pytest.raises(ValueError, match="bfloat16 rows"):
        RowWindows(rows, price, np.array([[10, 90]]), 8, [1], batch_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="shift/scale"):
        RowWindows(rows.bfloat16(), price, np.array([[10, 90]]), 8, [1], batch_dtype=torch.bfloat16,
                   shift=torch.zeros(3), scale=torch.ones(3))


def test_batch_dtype_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"`data.batch_dtype` = 'bf16' is not one of float32, bfloat16"):
        load_config(overrides=['data.batch_dtype="bf16"'])
    with pytest.raises(ConfigError, match='needs `data.source` = "store"'):
        load_config(overrides=['data.batch_dtype="bfloat16"'])


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_trainer_trains_on_bf16_batches(stores: dict[str, Path], tmp_path: Path, precision: str) -> None:
    from stride.train.trainer import Trainer

    cfg = load_config(overrides=[
        'data.source="store"', f'data.store="{stores["float32"]}"', "data.seq_len=16", "data.horizons=[1, 5]",
        'data.batch_dtype="bfloat16"', f'train.precision="{precision}"', "train.batch_size=16", "train.steps=4",
        "train.val_every=2", "train.val_batches=2", "train.threads=1", "metrics.progress=false",
        "metrics.flops=false", "optim.warmup_steps=1",
    ])
    res = Trainer(config=cfg, out=str(tmp_path / "run")).fit()
    assert res.summary["steps"] == 4
    assert 0.3 < res.summary["final_train_loss"] < 3 and 0.3 < res.summary["final_val_loss"] < 3


@pytest.mark.parametrize("batch_dtype", ["float32", "bfloat16"])
def test_gather_threads_give_the_same_batches(stores: dict[str, Path], batch_dtype: str) -> None:
    """`data.gather_threads` from the config to the loader's batches: the same bytes as one thread."""
    store = stores["bfloat16" if batch_dtype == "bfloat16" else "float32"]
    extra = ['data.normalize="none"', f'data.batch_dtype="{batch_dtype}"']
    ref = build_store_sources(_cfg(store, *extra))
    got = build_store_sources(_cfg(store, *extra, "data.gather_threads=3"))
    assert got.train._gather.threads == 3  # noqa: SLF001
    for (xr, yr), (xg, yg) in zip(_batches(ref.train, 5), _batches(got.train, 5), strict=True):
        assert xg.dtype == xr.dtype and torch.equal(xg.view(torch.int16), xr.view(torch.int16)) and torch.equal(yg, yr)
