"""The C window copy gives the numpy gather's bytes, bit for bit (every dtype, normalisation, read-ahead,
streaming stores, threads), its price pick the same targets, and without a compiler the numpy path runs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from stride.data import native
from stride.data.gather import WindowGather
from stride.data.windows import RowWindows

needs_native = pytest.mark.skipif(native.load() is None,
                                  reason=f"the C copy kernel is unavailable here: {native.unavailable_reason()}")


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int16) if x.dtype == torch.bfloat16 else x.view(torch.int32)


@needs_native
@pytest.mark.parametrize("rows_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("norm", ["none", "shift+scale", "scale"])
@pytest.mark.parametrize("settings", [{"read_ahead": 0, "stream": False}, {"read_ahead": 2048, "stream": True},
                                      {"read_ahead": 4096, "stream": False}])
def test_native_copy_equals_numpy(rows_dtype: torch.dtype, norm: str, settings: dict, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    rows = (torch.randn(3000, 37, generator=g) * 100).to(rows_dtype)  # 37 features: rows not 64-byte multiples
    rows[5, 3] = 1e-40  # a float32 subnormal survives the copy and the normalisation alike
    t = 24
    starts = torch.randint(0, 3000 - t + 1, (300,), generator=g).numpy()
    shift = torch.randn(37, generator=g) if norm == "shift+scale" else None
    scale = torch.rand(37, generator=g) + 0.5 if norm != "none" else None
    for threads in (1, 3):
        fast = WindowGather(rows, t, threads, **settings)
        slow = WindowGather(rows, t, threads, use_native=False)
        assert fast.native and not slow.native
        for kw in ({}, {"float32": True, "shift": shift, "scale": scale}):
            a, b = fast(starts, **kw), slow(starts, **kw)
            assert a.dtype == b.dtype and a.shape == b.shape == (300, t, 37)
            assert torch.equal(_bits(a), _bits(b)), (seed, threads, kw.keys())


@needs_native
def test_native_price_pick_gives_the_same_targets(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    table = torch.rand(4000, 6, generator=g) * 50 + 1
    for dtype in (torch.float32, torch.bfloat16):
        rows = table.to(dtype)
        ranges = np.array([[40, 1500], [1700, 3900]])
        fast = RowWindows(rows, rows[:, 2], ranges, 32, [1, 5, 20])
        slow = RowWindows(rows, rows[:, 2], ranges, 32, [1, 5, 20])
        slow.configure_gather(1, use_native=False)
        ids = torch.randint(0, len(fast), (512,), generator=g)
        assert torch.equal(fast.gather(ids)[1], slow.gather(ids)[1]), seed


def test_without_a_compiler_the_numpy_path_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("STRIDE_NATIVE", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # switched off on purpose: no notice
        assert native.load() is None and native.unavailable_reason() == "switched off (STRIDE_NATIVE=0)"
    rows = torch.arange(2000.0).reshape(200, 10)
    g = WindowGather(rows, 8)
    assert not g.native
    x = g(np.array([0, 192]), float32=True, scale=torch.full((10,), 2.0))
    assert torch.equal(x[1], rows[192:200] * 2)
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("STRIDE_NATIVE", "1")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CC", raising=False)
    with pytest.warns(RuntimeWarning, match=r"C window copy is unavailable \(no C compiler.*numpy") as seen:
        assert native.load() is None and "no C compiler" in native.unavailable_reason()
        assert native.load() is None and not WindowGather(rows, 8).native  # told once a process, not per gather
    assert len(seen) == 1
    monkeypatch.setattr(native, "_state", {})  # the next user builds (or finds) the library again


@needs_native
def test_library_is_built_once_under_a_tagged_temporary_name(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIDE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(native, "_state", {})
    assert native.load() is not None
    built = list((tmp_path / "native").iterdir())
    assert len(built) == 1 and built[0].name.startswith("copy_kernel-") and built[0].suffix == ".so"
    stamp = built[0].stat().st_mtime_ns
    monkeypatch.setattr(native, "_state", {})
    assert native.load() is not None and built[0].stat().st_mtime_ns == stamp  # found, not rebuilt
    monkeypatch.setattr(native, "_state", {})


def test_a_failing_compiler_falls_back_with_one_notice_and_leaves_no_file(tmp_path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRIDE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("STRIDE_NATIVE", "1")
    monkeypatch.setenv("CC", "false")  # found on PATH, exits 1 for any input
    monkeypatch.setattr(native, "_state", {})
    with pytest.warns(RuntimeWarning, match=r"could not be built or loaded: false failed") as seen:
        assert native.load() is None and native.load() is None
    assert len(seen) == 1
    assert list((tmp_path / "native").iterdir()) == []  # no half-built library left to be loaded later
    x = WindowGather(torch.arange(60.0).reshape(20, 3), 4)(np.array([16]))
    assert torch.equal(x[0], torch.arange(48.0, 60.0).reshape(4, 3))
    monkeypatch.setattr(native, "_state", {})
