"""Device-resident series (`data.device_resident`), run with device = cpu here and on the GPU where there is
one (benchmarks/gpu_check.sh runs this file there): the same batches as the host path, bit for bit (synthetic
and store sources, float32 with train normalisation, bf16, several runs), the same sampler state and an exact
resume; "auto" stays off on a CPU device and the summary says so."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "foundation"))
from data_fixtures import write_parquet_dataset  # noqa: E402
from helpers import small_config  # noqa: E402

from stride.config import load_config  # noqa: E402
from stride.data.build import build_data, train_loader  # noqa: E402
from stride.data.device_windows import DeviceWindows, device_bytes, fits  # noqa: E402
from stride.data.ingest import ingest  # noqa: E402
from stride.data.splits import build_store_sources  # noqa: E402
from stride.kernels.runtime import triton_runs_on  # noqa: E402
from stride.train.trainer import Trainer  # noqa: E402

CPU = torch.device("cpu")
DEV = torch.device("cuda", 0) if torch.cuda.is_available() else CPU  # where the device path is checked


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("device")
    write_parquet_dataset(root / "src", symbols=("AAA", "BBB", "CCC"), n_days=3, per_day=60)
    return ingest(root / "src", root / "store")


def _store_cfg(store: Path, *extra: str):  # noqa: ANN202
    return load_config(overrides=['data.source="store"', f'data.store="{store}"', "data.seq_len=8",
                                  "data.horizons=[1, 3]", "data.val_fraction=0.3", *extra]).data


def _same(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> bool:
    (xa, ya), (xb, yb) = a, b
    bits = (lambda t: t.view(torch.int16)) if xa.dtype == torch.bfloat16 else (lambda t: t.view(torch.int32))
    (xa, ya), (xb, yb) = (xa.cpu(), ya.cpu()), (xb.cpu(), yb.cpu())
    return xa.dtype == xb.dtype and xa.shape == xb.shape and torch.equal(bits(xa), bits(xb)) and \
        torch.equal(ya.view(torch.int32), yb.view(torch.int32))


def _impl_or_skip(impl: str) -> str:
    if impl == "triton" and not triton_runs_on(torch.empty(0, device=DEV)):
        pytest.skip("the Triton gather needs CUDA or Triton's interpreter (TRITON_INTERPRET=1, set by conftest)")
    return impl


@pytest.mark.parametrize("impl", ["auto", "torch", "triton"])
@pytest.mark.parametrize("extra", [[], ['data.normalize="train"'], ['data.batch_dtype="bfloat16"'],
                                   ['data.normalize="rolling"', "data.normalize_window=5"],
                                   ["data.cross_days=true", 'data.columns=["f2", "close"]']])
def test_store_windows_on_the_device_are_the_host_batches(store: Path, extra: list[str], impl: str,
                                                           seed: int) -> None:
    src = build_store_sources(_store_cfg(store, *extra)).train
    dev = DeviceWindows(src, DEV, impl=_impl_or_skip(impl))
    assert dev.impl == ("triton" if DEV.type == "cuda" else "torch") if impl == "auto" else impl
    assert len(dev) == len(src)
    g = torch.Generator().manual_seed(seed)
    for _ in range(5):
        ids = torch.randint(0, len(src), (37,), generator=g)
        assert _same(dev.gather(ids), src.gather(ids)), (seed, extra, impl)
    every = torch.arange(len(src))  # every window once, the first and last of each run included
    assert _same(dev.gather(every), src.gather(every))
    assert dev.rows.shape[0] < src.features.shape[0]  # only the training split's rows


def test_synthetic_windows_on_the_device_are_the_host_batches(seed: int) -> None:
    cfg = small_config(data__seed=seed % 1000).data
    host = build_data(cfg, 32).train
    dev = DeviceWindows(host.source, DEV)
    ids = torch.randint(0, len(dev), (64,), generator=torch.Generator().manual_seed(seed))
    assert _same(dev.gather(ids), host.source.gather(ids)), seed


def test_device_loader_order_state_and_exact_resume(store: Path) -> None:
    cfg = _store_cfg(store, 'data.normalize="train"')
    on, off = replace(cfg, device_resident=True), replace(cfg, device_resident=False, prefetch=0, gather_threads=1)
    host, _ = train_loader(off, build_store_sources(cfg).train, 16, CPU)
    dev, info = train_loader(on, build_store_sources(cfg).train, 16, DEV)
    assert isinstance(dev.source, DeviceWindows) and info["device_resident"] and info["prefetch"] == 0
    ref = []
    for epoch in (0, 1):  # two epochs, uninterrupted, on the host path
        host.set_epoch(epoch)
        ref += list(host)
    n = len(host)
    dev.set_epoch(0)
    it = iter(dev)
    got = [next(it) for _ in range(n // 2)]
    state = dev.state_dict()
    assert state == {**host.state_dict(), "epoch": 0, "position": n // 2}
    it.close()
    again, _ = train_loader(on, build_store_sources(cfg).train, 16, DEV)
    again.load_state_dict(state)  # a resumed run: the rest of epoch 0, then epoch 1
    got += list(again)
    again.set_epoch(1)
    got += list(again)
    assert len(got) == len(ref) and all(_same(a, b) for a, b in zip(got, ref, strict=True))


def test_auto_is_off_on_a_cpu_device_and_the_summary_says_why(store: Path) -> None:
    src = build_store_sources(_store_cfg(store)).train
    ok, why = fits(src, CPU)
    assert not ok and why.startswith("off: the device is cpu")
    assert device_bytes(src) == src.device_row_count() * src.device_row_bytes() + len(src) * (8 + 2 * 4)
    cfg = small_config(train__steps=4, train__device="cpu")
    s = Trainer(config=cfg, write_run_dir=False).fit().summary
    assert s["data_loader"]["device_resident"] is False and "cpu" in s["data_loader"]["device_resident_reason"]


def test_training_on_device_resident_windows_gives_the_same_run() -> None:
    """The same batches, so the same parameters after training (bit for bit on one machine)."""
    runs = {}
    for resident in ("false", "true"):
        cfg = small_config(train__steps=6, data__device_resident=resident == "true", data__prefetch=0,
                           data__gather_threads=1, train__device="cpu")
        tr = Trainer(config=cfg, write_run_dir=False)
        s = tr.fit().summary
        runs[resident] = (s["params_sha256"], s["final_train_loss"], s["data_loader"])
    assert runs["true"][:2] == runs["false"][:2]
    assert runs["true"][2]["device_resident"] is True and runs["true"][2]["reasons"]["prefetch"].startswith("0:")


def test_the_loader_stages_ids_once_a_chunk_and_yields_the_same_batches() -> None:
    """A source with `stage_ids` (DeviceWindows) gets the window ids of IDS_CHUNK batches in one call, not a
    copy a batch, and the batches, the order and a mid-chunk resume are those of a source without it."""
    from stride.data.loader import IDS_CHUNK, ShardedLoader

    class Plain:
        def __len__(self) -> int:
            return 5 * IDS_CHUNK + 3

        def gather(self, idx: torch.Tensor):  # noqa: ANN202
            return idx.float()[:, None], idx.float()[:, None]

    class Staging(Plain):
        def __init__(self) -> None:
            self.staged: list[int] = []

        def stage_ids(self, ids: torch.Tensor) -> torch.Tensor:
            self.staged.append(len(ids))
            return ids.clone()

    staging = Staging()
    ref = [x for x, _ in ShardedLoader(Plain(), 2, seed=3)]
    got = [x for x, _ in ShardedLoader(staging, 2, seed=3)]
    n = len(ref)
    assert n == len(got) == (5 * IDS_CHUNK + 3) // 2 and all(torch.equal(x, y) for x, y in zip(got, ref, strict=True))
    assert len(staging.staged) == -(-n // IDS_CHUNK) and max(staging.staged) == 2 * IDS_CHUNK
    resumed = ShardedLoader(staging, 2, seed=3)
    resumed.load_state_dict({**resumed.state_dict(), "position": IDS_CHUNK + 5})  # inside the second chunk
    rest = [x for x, _ in resumed]
    assert len(rest) == n - IDS_CHUNK - 5
    assert all(torch.equal(x, y) for x, y in zip(rest, ref[IDS_CHUNK + 5 :], strict=True))
