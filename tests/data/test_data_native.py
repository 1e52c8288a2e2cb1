"""The C window copy gives the numpy gather's bytes, bit for bit (every dtype, normalisation, read-ahead,
streaming stores, threads), its price pick the same targets, and without a compiler the numpy path runs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from stride.data import native, windows
from stride.data.gather import BatchBuffers, WindowGather
from stride.data.windows import RowWindows

needs_native = pytest.mark.skipif(native.load() is None,
                                  reason=f"the C copy kernel is unavailable here: {native.unavailable_reason()}")


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int16) if x.dtype == torch.bfloat16 else x.view(torch.int32)


@needs_native
@pytest.mark.parametrize("rows_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("norm", ["none", "shift+scale", "scale"])
@pytest.mark.parametrize("settings", [{"ahead": 0, "stream": False}, {"ahead": 4, "stream": True},
                                      {"ahead": 500, "stream": False}, {"ahead": 0, "stream": False, "lines": 4},
                                      {"ahead": 4, "stream": True, "lines": True},
                                      {"ahead": 2, "stream": True, "lines": 1}])
# t = 24: a window under one 4 KiB page; t = 60: 2.2 pages (float32), so 12 page streams copy windows
# in groups of 6 (bf16: 1.1 pages, in twelves; 4 streams: pairs and fours), each with a tail; t = 200:
# 7.2 pages (float32), 7 at once (bf16: 3.6 pages, in fours); t = 800: 28.9 pages, a window's pages 12,
# 12 then 4 at a time and a tail (4 streams: 4 at a time; bf16: 14.5 pages). 302 windows: the last
# group of a thread's part is short
@pytest.mark.parametrize("t", [24, 60, 200, 800])
def test_native_copy_equals_numpy(rows_dtype: torch.dtype, norm: str, settings: dict, t: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    rows = (torch.randn(3000, 37, generator=g) * 100).to(rows_dtype)  # 37 features: rows not 64-byte multiples
    rows[5, 3] = 1e-40  # a float32 subnormal survives the copy and the normalisation alike
    starts = torch.randint(0, 3000 - t + 1, (302,), generator=g).numpy()
    shift = torch.randn(37, generator=g) if norm == "shift+scale" else None
    scale = torch.rand(37, generator=g) + 0.5 if norm != "none" else None
    for threads in (1, 3):
        fast = WindowGather(rows, t, threads, **settings)
        slow = WindowGather(rows, t, threads, use_native=False)
        assert fast.native and not slow.native
        for kw in ({}, {"float32": True, "shift": shift, "scale": scale}):
            a, b = fast(starts, **kw), slow(starts, **kw)
            assert a.dtype == b.dtype and a.shape == b.shape == (302, t, 37)
            assert torch.equal(_bits(a), _bits(b)), (seed, threads, kw.keys())


def test_page_streams_outside_the_kernel_range_are_refused() -> None:
    rows = torch.zeros(100, 8)
    for bad in (-1, 17):
        with pytest.raises(ValueError, match=r"page streams \(lines\) = .* must be in \[0, 16\]"):
            WindowGather(rows, 4, lines=bad)
    assert WindowGather(rows, 4, lines=True).lines == 12 and WindowGather(rows, 4, lines=False).lines == 0


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


def _reference_batch(rows: torch.Tensor, price: torch.Tensor, ranges: np.ndarray, t: int, horizons: list[int],
                     ids: np.ndarray, shift, scale, ts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
    """The batch by hand: each window sliced out of the rows, targets from float64 prices with numpy's log."""
    ranges = ranges[ranges[:, 1] > ranges[:, 0]]
    ends = np.concatenate([np.arange(a, z) for a, z in ranges])[ids]
    x = torch.stack([rows[e - t + 1 : e + 1] for e in ends.tolist()])
    if shift is not None or scale is not None:
        x = x.float()
        if shift is not None:
            x = x - shift
        if scale is not None:
            x = x * scale
    p = np.log(price.float().numpy()[ends[:, None] + np.array([0, *horizons])].astype(np.float64))
    return x, torch.from_numpy((p[:, 1:] - p[:, :1]).astype(np.float32) * ts.numpy())


@needs_native
@pytest.mark.parametrize("targets", ["log_column", "prices"])
@pytest.mark.parametrize("case", ["float32", "float32+norm", "bf16_rows_float32_batch", "bf16"])
def test_row_windows_give_the_reference_batch_bit_for_bit(case: str, targets: str, seed: int,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Window ids -> first rows, the copy with page-head hints on 1 and 3 threads, and the targets made in the
    copy from the log-price column (or from the prices read in the copy, numpy's log and the rest in C, where
    that column is too large): the same bytes as slicing each window and numpy's targets of its prices."""
    if targets == "prices":
        monkeypatch.setattr(windows, "LOG_PRICE_MAX_BYTES", 0)
    g = torch.Generator().manual_seed(seed)
    table = torch.rand(5000, 33, generator=g) * 40 + 1  # 33 features: rows not 64-byte multiples
    rows = table.to(torch.bfloat16) if case.startswith("bf16") else table
    shift = torch.randn(33, generator=g) if case == "float32+norm" else None
    scale = torch.rand(33, generator=g) + 0.5 if case == "float32+norm" else None
    ts = torch.rand(3, generator=g) + 0.5
    ranges = np.array([[100, 1900], [2300, 2300], [2500, 4970]])  # an empty range is dropped
    t, hz = 48, [1, 5, 20]
    dtype = torch.bfloat16 if case == "bf16" else torch.float32
    ids = torch.randint(0, 1800 + 2470, (700,), generator=g)
    xr, yr = _reference_batch(rows, rows[:, 2], ranges, t, hz, ids.numpy(), shift, scale, ts)
    if case == "bf16_rows_float32_batch":
        xr = xr.float()
    for threads in (1, 3):
        for settings in ({"ahead": 0, "stream": False}, {"ahead": 4, "stream": True}, {"ahead": 64},
                         {"ahead": 4, "lines": 4, "stream": True}, {"ahead": 2, "lines": 0},
                         {"ahead": 2, "lines": 1, "stream": False}):
            src = RowWindows(rows, rows[:, 2], ranges, t, hz, shift=shift, scale=scale, target_scale=ts,
                             batch_dtype=dtype)
            src.configure_gather(threads, **settings)
            for part in (slice(None), slice(0, 5), slice(None, None, 2)):  # int32 and strided ids are taken too
                x, y = src.gather(ids[part].int() if part == slice(0, 5) else ids[part])
                assert x.dtype == xr.dtype and torch.equal(_bits(x), _bits(xr[part])), (case, threads, settings)
                assert torch.equal(y, yr[part]), (case, threads, settings)
                if part == slice(None):  # contiguous int64 ids: one C call a batch (WindowGather.id_batches)
                    assert src._batch_key is not None and src._batch_key[4] is not None
            assert (src._log_picks is not None) == (targets == "log_column")
    ts2 = torch.rand(3, generator=g) + 2  # a scale fitted after the source was made (as splits.py does)
    src.target_scale = ts2
    assert torch.equal(src.gather(ids)[1], _reference_batch(rows, rows[:, 2], ranges, t, hz, ids.numpy(), shift,
                                                            scale, ts2)[1])


@pytest.mark.parametrize("use_native", [True, False])
def test_window_ids_outside_the_source_raise(use_native: bool) -> None:
    if use_native and native.load() is None:
        pytest.skip(f"the C copy kernel is unavailable here: {native.unavailable_reason()}")
    rows = torch.rand(300, 4) + 1
    src = RowWindows(rows, rows[:, 0], np.array([[20, 100], [150, 250]]), 16, [1, 5])
    src.configure_gather(1, use_native=use_native)
    n = len(src)
    for bad in ([0, n], [-1, 3], [n + 50]):
        with pytest.raises(IndexError, match="outside"):
            src.gather(torch.tensor(bad))
    with pytest.raises(IndexError, match="outside"):
        WindowGather(rows, 16, use_native=use_native)(np.array([0, 285]))  # past the last full window
    assert src.gather(torch.tensor([0, n - 1]))[0].shape == (2, 16, 4)


@needs_native
def test_resume_with_hinted_copy_continues_the_uninterrupted_order(seed: int) -> None:
    """The copy settings change no batch and no loader state: 5 batches, a state dict, a new loader with other
    settings resumed from it, give the batches of one uninterrupted run."""
    from stride.data.loader import ShardedLoader

    rows = torch.rand(4000, 8, generator=torch.Generator().manual_seed(seed)) + 1
    ranges = np.array([[31, 3979]])

    def loader(**settings: object) -> ShardedLoader:
        src = RowWindows(rows, rows[:, 1], ranges, 32, [1, 20])
        src.configure_gather(1, **settings)
        return ShardedLoader(src, 64, seed=seed)

    whole = [b for _, b in zip(range(12), loader(ahead=0, stream=False), strict=False)]
    first = loader(ahead=4, stream=True)
    it = iter(first)
    head = [next(it) for _ in range(5)]
    state = first.state_dict()
    second = loader(ahead=16, stream=False)
    second.load_state_dict(state)
    tail = [b for _, b in zip(range(7), second, strict=False)]
    assert state["position"] == 5
    for (x, y), (xw, yw) in zip(head + tail, whole, strict=True):
        assert torch.equal(x, xw) and torch.equal(y, yw)


@needs_native
def test_batch_buffers_are_reused_only_after_every_holder_let_go(seed: int) -> None:
    """A prefetch thread's 4 MiB allocations are new memory each time (page faults), so batches come from
    buffers recycled when their tensor dies: never while a view, slice or numpy array of a batch lives
    (its values stay as gathered), and reused once nothing refers to it."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(4000, 32, generator=g)
    gather = WindowGather(rows, 64)
    starts = [torch.randint(0, 4000 - 64, (64,), generator=g).numpy() for _ in range(6)]
    x0 = gather(starts[0])
    kept = [x0[5], x0.numpy()[7:9], x0.view(64, -1)[:, 3]]
    want = [k.clone() if isinstance(k, torch.Tensor) else k.copy() for k in kept]
    first = x0.data_ptr()
    del x0
    later = [gather(s) for s in starts[1:]]
    assert first not in {x.data_ptr() for x in later}  # views of batch 0 live: its buffer is not handed out
    for x, s in zip(later, starts[1:], strict=True):
        assert torch.equal(x, torch.stack([rows[a : a + 64] for a in s.tolist()]))
    for k, w in zip(kept, want, strict=True):
        assert (torch.equal(k, w) if isinstance(k, torch.Tensor) else np.array_equal(k, w))
    freed = {x.data_ptr() for x in later} | {first}
    del kept, later, x, k  # the loops' last items too: any one reference keeps a buffer taken
    again = [gather(s) for s in starts[:3]]
    assert len({x.data_ptr() for x in again}) == 3 and {x.data_ptr() for x in again} <= freed  # no new memory
    assert torch.equal(again[0], torch.stack([rows[a : a + 64] for a in starts[0].tolist()]))
    many = [gather(starts[0]) for _ in range(3 * BatchBuffers.MAX_KEPT)]  # a burst of live batches:
    assert len({x.data_ptr() for x in many}) == len(many)  # each its own memory ...
    assert all(torch.equal(x, again[0]) for x in many)

    def ring() -> list:
        (r,) = gather._buffers._rings.values()
        return r
    assert len(ring()) == 3 + 3 * BatchBuffers.MAX_KEPT  # ... kept for reuse while held
    del many, again
    after = [gather(starts[k % 6]) for k in range(BatchBuffers.MAX_KEPT)]  # idle ones beyond MAX_KEPT go ...
    kept = {e[0].data_ptr() for e in ring()}
    assert len(kept) == BatchBuffers.MAX_KEPT and {x.data_ptr() for x in after} == kept  # ... the rest is reused
    del after
    flood = [gather(starts[0]) for _ in range(BatchBuffers.MAX_RING + 8)]
    assert len(ring()) == BatchBuffers.MAX_RING and len({x.data_ptr() for x in flood}) == len(flood)


@needs_native
def test_batch_buffers_stay_taken_while_autograd_or_another_thread_holds_them(seed: int) -> None:
    """A batch saved for backward (the model's first matmul keeps its input) is not overwritten before the
    backward reads it; a batch's tensor flags (requires_grad) do not carry over to the next use of its
    memory; two threads taking buffers at once never get the same one while both live."""
    import threading

    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(3000, 8, generator=g)
    gather = WindowGather(rows, 16)
    starts = [torch.randint(0, 3000 - 16, (32,), generator=g).numpy() for _ in range(12)]
    w = torch.randn(8, 1, dtype=torch.float32, requires_grad=True)
    x0 = gather(starts[0])
    x0.requires_grad_()
    loss = (x0 @ w).square().sum()  # saves x0 for the gradient of w
    want = 2 * torch.einsum("btf,bt->f", x0.detach(), (x0.detach() @ w.detach()).squeeze(-1))
    ptr = x0.data_ptr()
    del x0
    others = [gather(s) for s in starts[1:4]]  # would take batch 0's memory if the graph did not hold it
    assert ptr not in {x.data_ptr() for x in others}
    loss.backward()
    torch.testing.assert_close(w.grad.squeeze(-1), want)
    del loss, others
    again = [gather(s) for s in starts[:4]]
    assert ptr in {x.data_ptr() for x in again} and not any(x.requires_grad for x in again)
    del again

    live: list[list[torch.Tensor]] = [[], []]

    def take(k: int) -> None:
        for s in starts * 4:
            live[k].append(gather(s))

    threads = [threading.Thread(target=take, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    both = live[0] + live[1]
    assert len({x.data_ptr() for x in both}) == len(both)
    for k in range(2):
        for x, s in zip(live[k], starts * 4, strict=True):
            assert torch.equal(x, torch.stack([rows[a : a + 16] for a in s.tolist()]))


@needs_native
def test_batch_buffers_idle_ones_go_even_behind_a_held_batch(seed: int) -> None:
    """Trimming back to MAX_KEPT skips a batch held for good (the oldest base): a held first batch and a burst
    of released ones left 32 bases kept where 8 were meant (review finding)."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(3000, 8, generator=g)
    gather = WindowGather(rows, 16)
    starts = torch.randint(0, 3000 - 16, (32,), generator=g).numpy()
    first = gather(starts)  # held throughout
    burst = [gather(starts) for _ in range(BatchBuffers.MAX_RING - 1)]
    del burst
    x = gather(starts)
    (ring,) = gather._buffers._rings.values()
    assert len(ring) == BatchBuffers.MAX_KEPT and first.data_ptr() in {e[0].data_ptr() for e in ring}
    assert torch.equal(first, x) and torch.equal(x, torch.stack([rows[a : a + 16] for a in starts.tolist()]))


@needs_native
def test_a_batch_made_in_inference_mode_leaves_later_batches_trainable(seed: int) -> None:
    """An evaluation under torch.inference_mode that builds the first batch of a shape must not make the kept
    memory an inference tensor: every later batch would be one, and training refuses to save it for backward."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(2000, 4, generator=g)
    gather = WindowGather(rows, 8)
    starts = torch.randint(0, 2000 - 8, (16,), generator=g).numpy()
    with torch.inference_mode():
        ev = gather(starts)
        assert not ev.is_inference()
    del ev
    x = gather(starts)
    assert not x.is_inference()
    w = torch.ones(4, requires_grad=True)
    (x * w).sum().backward()  # raised "Inference tensors cannot be saved for backward" before the fix
    torch.testing.assert_close(w.grad, x.sum(dim=(0, 1)))


def _send_batches(q, received, done, seed: int) -> None:  # noqa: ANN001  (a forked child: builds, sends, builds more)
    g = torch.Generator().manual_seed(seed)
    rows = torch.arange(2000 * 4, dtype=torch.float32).reshape(2000, 4)
    gather = WindowGather(rows, 8)
    starts = [torch.randint(0, 2000 - 8, (16,), generator=g).numpy() for _ in range(3)]
    x = gather(starts[0])
    q.put(x)  # torch moves x's storage into shared memory, in place
    received.wait(60)  # the parent has it: the queue's feeder thread no longer holds x
    del x
    for s in starts[1:]:
        q.put(float(gather(s).sum()))  # the next batches, each let go at once
    done.wait(60)  # the shared memory lives while the parent reads it


@needs_native
def test_a_batch_sent_to_another_process_is_never_written_again(seed: int) -> None:
    """torch.multiprocessing moves a sent batch's storage into shared memory in place, so the kept base points
    there too; once the sender lets go, its count is idle while the receiver still reads the batch. A base
    whose memory moved is dropped: before, the sender's next batches were written into the received one."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("fork")
    q, received, done = ctx.Queue(), ctx.Event(), ctx.Event()
    child = ctx.Process(target=_send_batches, args=(q, received, done, seed))
    child.start()
    try:
        got = q.get(timeout=60)
        want = got.clone()
        received.set()
        for _ in range(2):
            q.get(timeout=60)
        assert torch.equal(got, want), "the received batch changed while the sender built its next ones"
    finally:
        done.set()
        child.join(30)


@needs_native
def test_batch_buffers_taken_and_let_go_from_several_threads(seed: int) -> None:
    """Three threads taking and dropping batches at random with a tiny GIL switch interval: no error and every
    batch held keeps its values. (A review found a trim in one thread could shift the list under another's scan,
    IndexError; one lock now serialises the takers. This run did not reproduce that race on the old code: it
    checks the property, not that bug.)"""
    import random
    import sys
    import threading

    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(3000, 8, generator=g)
    gather = WindowGather(rows, 16)
    starts = [torch.randint(0, 3000 - 16, (8,), generator=g).numpy() for _ in range(6)]
    want = [torch.stack([rows[a : a + 16] for a in s.tolist()]) for s in starts]
    errors: list[BaseException] = []

    def work(k: int) -> None:
        rng = random.Random(k)
        held: list[tuple[int, torch.Tensor]] = []
        try:
            for _ in range(400):
                i = rng.randrange(len(starts))
                held.append((i, gather(starts[i])))
                if len(held) > rng.randrange(1, 12):
                    held.pop(rng.randrange(len(held)))
                for j, x in held:
                    if not torch.equal(x, want[j]):
                        raise AssertionError("a held batch changed")
        except BaseException as exc:  # noqa: BLE001  (reported by the test)
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors


@needs_native
def test_batches_are_right_without_torchs_storage_use_count(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where torch lacks the private use count, every batch is new memory: slower, the same values."""
    from stride.data import gather as gather_mod

    monkeypatch.setattr(gather_mod, "_use_count", None)
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(2000, 4, generator=g).to(torch.bfloat16)
    gather = WindowGather(rows, 8)
    starts = torch.randint(0, 2000 - 8, (16,), generator=g).numpy()
    xs = [gather(starts) for _ in range(3)]
    assert len({x.data_ptr() for x in xs}) == 3 and xs[0].dtype == torch.bfloat16
    assert all(torch.equal(x, torch.stack([rows[a : a + 8] for a in starts.tolist()])) for x in xs)


@needs_native
def test_a_gather_thread_takes_no_page_faults_once_its_buffers_exist(seed: int) -> None:
    """What the recycling is for: 4 MiB batches built on a second thread (as the prefetch thread builds them)
    and dropped by the consumer take no page faults after the first (a fresh 4 MiB buffer takes 1024)."""
    import resource
    import threading

    rows = torch.randn(20000, 32, generator=torch.Generator().manual_seed(seed))
    gather = WindowGather(rows, 128)
    rng = np.random.default_rng(seed)
    faults: list[int] = []

    def work() -> None:
        for i in range(10):
            if i == 2:
                faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt)
            x = gather(rng.integers(0, 20000 - 128, 256))
            del x  # dropped, as the consumer drops a batch after its step
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert faults[1] - faults[0] < 64, faults  # 8 batches of 4 MiB: 8192 faults if each were new memory


def _thp_mode() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return "absent"
    return text.split("[", 1)[1].split("]", 1)[0] if "[" in text else "absent"


def _anon_huge_kb(addr: int) -> int:
    """AnonHugePages of the mapping holding `addr` (/proc/self/smaps)."""
    hit = False
    with open("/proc/self/smaps") as f:
        for ln in f:
            head = ln.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                hit = lo <= addr < hi
            elif hit and ln.startswith("AnonHugePages:"):
                return int(ln.split()[1])
    return 0


@needs_native
def test_large_batches_are_written_into_huge_pages(seed: int) -> None:
    """A 4 MiB batch buffer is 2 MiB aligned and, where the kernel offers transparent huge pages (here:
    `madvise` mode), backed by them; the batch's values are the reference's all the same."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.randn(20000, 32, generator=g)
    gather = WindowGather(rows, 128)
    starts = torch.randint(0, 20000 - 128, (256,), generator=g).numpy()
    x = gather(starts)  # 256 x 128 x 32 float32 = 4 MiB
    assert x.data_ptr() % (2 << 20) == 0
    assert torch.equal(x, torch.stack([rows[a : a + 128] for a in starts.tolist()]))
    small = gather(starts[:8])  # 128 KiB: numpy's memory, as before
    assert torch.equal(small, x[:8])
    if _thp_mode() not in ("always", "madvise"):
        pytest.skip(f"transparent huge pages are {_thp_mode()!r} on this kernel")
    assert _anon_huge_kb(x.data_ptr()) >= 4096, "the 4 MiB batch is not in huge pages"
