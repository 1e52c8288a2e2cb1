"""Sequential (evaluation) batches as one slab per batch: the same windows and values as the window gather."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from data_fixtures import write_parquet_dataset  # noqa: E402

from stride.config import load_config  # noqa: E402
from stride.data.ingest import ingest  # noqa: E402
from stride.data.sequential import SequentialWindows, windows_to_device  # noqa: E402
from stride.data.splits import build_store_sources  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("seq")
    write_parquet_dataset(root / "src", n_days=3, per_day=70)
    return ingest(root / "src", root / "st")


@pytest.mark.parametrize("extra", [['data.normalize="train"'], ['data.normalize="expanding"'],
                                   ['data.normalize="none"', 'data.batch_dtype="bfloat16"']])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_slabs_hold_every_window_in_order_with_the_gathered_values(store: Path, extra: list[str],
                                                                   prefetch: int) -> None:
    cfg = load_config(overrides=['data.source="store"', f'data.store="{store}"', "data.seq_len=8",
                                 "data.horizons=[1, 3]", "data.val_fraction=0.3", *extra]).data
    src = build_store_sources(cfg).val
    seq = SequentialWindows(src, 16, prefetch=prefetch)
    batches = list(seq)
    assert len(batches) == len(seq)
    xs = torch.cat([x for x, _ in batches])  # materialises the views
    ys = torch.cat([y for _, y in batches])
    x_ref, y_ref = src.gather(torch.arange(len(src)))  # every window in id (= time) order, one by one
    assert xs.dtype == x_ref.dtype and torch.equal(xs, x_ref) and torch.equal(ys, y_ref)
    runs = src.runs()
    assert len(runs) == 2 and (runs[:, 1] - runs[:, 0] > 16).all()  # validation: last day of 2 symbols
    assert len(seq) == sum(-(-int(hi - lo) // 16) for lo, hi in runs)
    dense = list(SequentialWindows(src, 16, contiguous=True))
    assert all(x.is_contiguous() for x, _ in dense) and torch.equal(torch.cat([x for x, _ in dense]), x_ref)
    x0 = batches[0][0]
    assert not x0.is_contiguous() and x0.untyped_storage().nbytes() == (len(x0) + 7) * x0.shape[2] * x0.element_size()


def test_windows_to_device_moves_only_the_slab(store: Path) -> None:
    cfg = load_config(overrides=['data.source="store"', f'data.store="{store}"', "data.seq_len=8",
                                 "data.horizons=[1, 3]", "data.val_fraction=0.3"]).data
    x, _ = next(iter(SequentialWindows(build_store_sources(cfg).val, 16)))
    moved = windows_to_device(x, "meta")
    assert moved.shape == x.shape and moved.stride() == x.stride()
    assert moved.untyped_storage().nbytes() == (16 + 7) * x.shape[2] * 4 < x.numel() * 4
    dense = torch.randn(3, 4)
    assert windows_to_device(dense, "cpu") is dense
    with pytest.raises(IndexError, match="leave the table"):
        build_store_sources(cfg).val.gather_run(3, 4)
