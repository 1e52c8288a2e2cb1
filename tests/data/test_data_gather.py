"""The window gather against slicing, page hints (read-ahead requests, unmapping) leaving batches unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import stride.data.loader as loader_mod
from stride.data.gather import WindowGather
from stride.data.loader import ShardedLoader
from stride.data.pages import MappedRows, file_rss_bytes
from stride.data.windows import RowWindows


def _slices(rows: np.ndarray, starts: np.ndarray, t: int) -> np.ndarray:
    return np.stack([rows[s : s + t] for s in starts])


@pytest.mark.parametrize("t,b", [(128, 256), (128, 700), (7, 3), (12, 40)])  # sub-blocks k = 2, 1, 7 (rows), 4
def test_window_gather_equals_slicing(t: int, b: int) -> None:
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((3000, 5)).astype(np.float32)
    starts = rng.integers(0, 3000 - t + 1, b)
    starts[:2] = [0, 3000 - t]  # both ends
    x = WindowGather(torch.from_numpy(rows), t)(starts)
    assert x.shape == (b, t, 5) and x.dtype == torch.float32
    np.testing.assert_array_equal(x.numpy(), _slices(rows, starts, t))


def test_window_gather_bf16_strided_and_bounds() -> None:
    rng = np.random.default_rng(1)
    rows = torch.from_numpy(rng.standard_normal((500, 6)).astype(np.float32))
    starts = rng.integers(0, 500 - 16 + 1, 300)
    bf = rows.to(torch.bfloat16)
    xb = WindowGather(bf, 16)(starts)
    assert xb.dtype == torch.bfloat16
    assert torch.equal(xb.view(torch.int16), torch.from_numpy(_slices(bf.view(torch.int16).numpy(), starts, 16)))
    cols = rows[:, ::2]  # not contiguous: the row-take path
    np.testing.assert_array_equal(WindowGather(cols, 16)(starts).numpy(), _slices(cols.numpy(), starts, 16))
    with pytest.raises(IndexError, match=r"outside \[0, 484\]"):
        WindowGather(rows, 16)(np.array([0, 485]))


@pytest.mark.parametrize("threads,b", [(2, 256), (3, 7), (4, 2), (2, 1), (3, 0)])  # fewer windows than threads too
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_threaded_gather_equals_one_thread(threads: int, b: int, dtype: torch.dtype) -> None:
    rng = np.random.default_rng(3)
    rows = torch.from_numpy(rng.standard_normal((2000, 6)).astype(np.float32)).to(dtype)
    starts = rng.integers(0, 2000 - 24 + 1, b)
    if b >= 2:
        starts[:2] = [0, 2000 - 24]  # both ends
    got = WindowGather(rows, 24, threads)(starts)
    want = WindowGather(rows, 24)(starts)
    assert got.shape == (b, 24, 6) and got.dtype == dtype and got.is_contiguous()
    assert torch.equal(got.view(torch.int16) if dtype == torch.bfloat16 else got,
                       want.view(torch.int16) if dtype == torch.bfloat16 else want)
    with pytest.raises(IndexError, match=r"outside \[0, 1976\]"):
        WindowGather(rows, 24, threads)(np.array([0, 1977]))


def test_gather_threads_is_checked_and_reaches_the_store_source() -> None:
    from stride.config import load_config
    from stride.config.errors import ConfigError

    with pytest.raises(ConfigError, match=r"`data.gather_threads` = 0 must be > 0"):
        load_config(overrides=["data.gather_threads=0"])
    with pytest.raises(ValueError, match="gather threads = 0"):
        WindowGather(torch.zeros(10, 2), 4, 0)
    rows = torch.zeros(100, 3)
    w = RowWindows(rows, rows[:, 0], np.array([[20, 80]]), 8, [1], gather_threads=2)
    assert w._gather.threads == 2  # noqa: SLF001


def _mapped(tmp_path: Path, n: int = 4096, f: int = 64) -> np.memmap:
    rng = np.random.default_rng(2)
    path = tmp_path / "rows.bin"
    rng.standard_normal((n, f)).astype(np.float32).tofile(path)
    return np.memmap(path, np.float32, "c", shape=(n, f))


def test_will_need_merges_page_ranges(tmp_path: Path) -> None:
    m = MappedRows(_mapped(tmp_path))  # 256-byte rows: 16 rows a page
    m.will_need(np.array([0, 8, 100, 2000]), 16)  # rows 0-15, 8-23 (pages 0-1), 100-115 (pages 6-7), 2000-2015
    assert m.advised_ranges == 3
    m.will_need(np.array([4095]), 1)  # the last row: clipped to the file
    assert m.advised_ranges == 4


def test_release_unmaps_pages_and_batches_stay_the_same(tmp_path: Path) -> None:
    mm = _mapped(tmp_path, n=65536)  # 16 MiB
    t = torch.from_numpy(mm)
    price = torch.from_numpy(np.abs(mm[:, 0]) + 1.0)
    ranges = np.array([[31, 65536 - 5]])
    src = RowWindows(t, price, ranges, 32, [1, 5], feature_map=mm)
    idx = torch.arange(0, len(src), 7)
    x0, y0 = src.gather(idx)
    before = file_rss_bytes()
    src.release_pages()
    assert before - file_rss_bytes() > 8 * 2**20  # most of the 16 MiB was mapped, and is no longer
    x1, y1 = src.gather(idx)
    assert torch.equal(x0, x1) and torch.equal(y0, y1)
    tight = RowWindows(t, price, ranges, 32, [1, 5], feature_map=mm, resident_mb=1)  # releases as it goes
    x2, y2 = tight.gather(idx)
    assert torch.equal(x0, x2) and torch.equal(y0, y2) and file_rss_bytes() - before < 8 * 2**20


class _Recording:
    """A window source that records the ids it is asked to read ahead."""

    def __init__(self, n: int) -> None:
        self.n, self.advised = n, []

    def __len__(self) -> int:
        return self.n

    def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return idx.clone(), idx.float()[:, None]

    def will_need(self, idx: torch.Tensor) -> None:
        self.advised.append(idx.clone())


def test_loader_reads_ahead_only_while_faults_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    faults = iter([0, 0, 0, 5] + [5] * 100)  # the 3rd gather (batch 2) takes a major fault
    monkeypatch.setattr(loader_mod, "thread_major_faults", lambda: next(faults))
    monkeypatch.setattr(loader_mod, "READAHEAD", 3)
    monkeypatch.setattr(loader_mod, "ADVISE_FOR", 2)
    monkeypatch.setattr(loader_mod, "FAULT_CHECK_EVERY", 1)  # the count read after every gather
    src = _Recording(120)
    batches = [x for x, _ in ShardedLoader(src, 10, seed=3).shard(1, 2)]
    plain = [x for x, _ in ShardedLoader(_Recording(120), 10, seed=3).shard(1, 2)]
    assert all(torch.equal(a, b) for a, b in zip(batches, plain, strict=True))
    # batch 2 faulted: before gathering batch 3, batches 4..6 are asked for; before batch 4, batch 7;
    # then no more (advice lasts ADVISE_FOR=2 batches after the last fault)
    assert len(src.advised) == 4
    for adv, want in zip(src.advised, [4, 5, 6, 7], strict=True):
        assert torch.equal(adv, batches[want])


def test_loader_reads_the_fault_count_every_few_batches_until_faults_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The count (a system call) is read every FAULT_CHECK_EVERY batches while no hints run, so a fault is seen
    at most that many batches late; then after every gather while hints run."""
    gathered, reads = [0], []
    src = _Recording(120)
    real = src.gather

    def gather(idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gathered[0] += 1
        return real(idx)

    def count() -> int:
        reads.append(gathered[0])
        return 5 if gathered[0] >= 3 else 0  # the 3rd gather (batch 2) takes a major fault

    src.gather = gather  # type: ignore[method-assign]
    monkeypatch.setattr(loader_mod, "thread_major_faults", count)
    monkeypatch.setattr(loader_mod, "READAHEAD", 3)
    monkeypatch.setattr(loader_mod, "ADVISE_FOR", 2)
    batches = [x for x, _ in ShardedLoader(src, 10, seed=3)]
    assert reads[:3] == [0, 1, 5]  # at the start, after batch 0, after batch 4 (FAULT_CHECK_EVERY = 4)
    assert reads[3:6] == [6, 7, 9]  # hints run to batch 6 (4 + ADVISE_FOR): read after 5 and 6; then at 8
    # batch 4's read saw the fault: batches 6..8 asked for before gathering 5, then 9 before 6
    assert [int(a[0]) for a in src.advised] == [int(batches[j][0]) for j in (6, 7, 8, 9)]
