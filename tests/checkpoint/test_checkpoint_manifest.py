"""The manifest's checksums: what is written, what still verifies, and that the zip CRC switch is restored."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
import xxhash
from torch import nn

from stride.checkpoint import CheckpointStore, verify
from stride.checkpoint.manifest import FORMAT


def _saved(tmp_path: Path, asynchronous: bool = False) -> tuple[CheckpointStore, Path, nn.Module]:
    torch.manual_seed(0)
    model = nn.Linear(64, 32)
    store = CheckpointStore(tmp_path / "ck", log=lambda m: None)
    store.save({"model": model.state_dict()}, 1, {"config_hash": "m"}, asynchronous=asynchronous)
    store.wait()
    return store, store.folder(1), model


def test_manifest_holds_every_file_with_its_size_and_xxh3_128(tmp_path: Path) -> None:
    store, folder, _ = _saved(tmp_path)
    store.close()
    m = json.loads((folder / "manifest.json").read_text())
    assert m["format"] == FORMAT and m["checksum"] == "xxh3_128" and m["step"] == 1
    on_disk = sorted(p.name for p in folder.iterdir() if p.name != "manifest.json")
    assert sorted(m["files"]) == on_disk and ".metadata" in on_disk and "meta.json" in on_disk
    for name, info in m["files"].items():
        data = (folder / name).read_bytes()
        assert info == {"bytes": len(data), "xxh3_128": xxhash.xxh3_128(data).hexdigest()}


def test_a_sha256_manifest_from_an_older_stride_still_verifies_and_detects_corruption(tmp_path: Path) -> None:
    store, folder, _ = _saved(tmp_path)
    store.close()
    m = json.loads((folder / "manifest.json").read_text())
    m["format"] = "stride-checkpoint/1"
    m["files"] = {n: {"bytes": i["bytes"], "sha256": hashlib.sha256((folder / n).read_bytes()).hexdigest()}
                  for n, i in m["files"].items()}
    (folder / "manifest.json").write_text(json.dumps(m))
    assert verify(folder, 1).ok
    shard = folder / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0x01  # one bit, same size
    shard.write_bytes(bytes(data))
    v = verify(folder, 1)
    assert not v.ok and v.reason == "__0_0.distcp does not match its sha256 checksum (corrupted)"
    assert verify(folder, 1, checksums=False).ok  # sizes alone cannot see it


def test_shards_written_without_the_zip_crc_load_exactly_and_the_setting_is_restored(tmp_path: Path) -> None:
    assert torch.serialization.get_crc32_options() is True
    for asynchronous in (False, True):
        store, folder, model = _saved(tmp_path / str(asynchronous), asynchronous)
        assert torch.serialization.get_crc32_options() is True  # back on once the write ended
        template = {"model": {k: torch.zeros_like(v) for k, v in model.state_dict().items()}}
        loaded = store.load(folder, lambda keys, t=template: t)
        store.close()
        for k, v in model.state_dict().items():
            assert torch.equal(loaded["model"][k], v)


def test_where_the_crc_setting_is_process_wide_the_writer_leaves_it_alone(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.11's set_crc32_options is one flag for the whole process: DCP's writer threads turning it off and
    back on raced and could leave it off for every later torch.save. There the writer keeps torch's CRC."""
    import stride.checkpoint.dcp_io as dcp_io

    assert isinstance(dcp_io.crc_setting_is_per_thread(), bool)  # True under torch 2.13, False under 2.11 (seen)
    assert torch.serialization.get_crc32_options() is True  # asking put the flag back
    monkeypatch.setattr(dcp_io, "crc_setting_is_per_thread", lambda: False)
    calls: list[bool] = []
    real = torch.serialization.set_crc32_options
    monkeypatch.setattr(torch.serialization, "set_crc32_options", lambda v: (calls.append(v), real(v))[1])
    store, folder, model = _saved(tmp_path, True)
    assert calls == [] and torch.serialization.get_crc32_options() is True
    template = {"model": {k: torch.zeros_like(v) for k, v in model.state_dict().items()}}
    loaded = store.load(folder, lambda keys, t=template: t)
    store.close()
    assert all(torch.equal(loaded["model"][k], v) for k, v in model.state_dict().items())


def test_threads_asking_at_once_whether_the_crc_setting_is_per_thread_leave_it_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """DCP's writer threads ask at the same moment. With a process-wide flag (torch 2.11, simulated here with a
    slow one so that the probes overlap) two probes at once each put back what the other had flipped and left
    the zip CRC off; asked under a lock, the first probe answers for all and the flag ends as it began."""
    import threading
    import time

    import stride.checkpoint.dcp_io as dcp_io

    flag = [True]

    def set_flag(v: bool) -> None:
        flag[0] = v
        time.sleep(0.02)  # a slow setter: the next thread's probe starts while this one's flip stands

    monkeypatch.setattr(torch.serialization, "get_crc32_options", lambda: flag[0])
    monkeypatch.setattr(torch.serialization, "set_crc32_options", set_flag)
    dcp_io._crc_per_thread.cache_clear()
    try:
        start = threading.Barrier(4)
        answers: list[bool] = []

        def ask(i: int) -> None:
            start.wait()
            time.sleep(0.005 * i)
            answers.append(dcp_io.crc_setting_is_per_thread())

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert answers == [False] * 4  # one flag for the process: not per thread
        assert flag[0] is True
    finally:
        dcp_io._crc_per_thread.cache_clear()  # the real torch's answer is asked again by the next test


@pytest.mark.parametrize("files", [1, True, "x"])
def test_a_load_with_a_manifest_that_lists_no_files_is_a_load_error(tmp_path: Path, files: object) -> None:
    """A manifest whose `files` is not a table raised TypeError before the ranks' agreement (outside review of audit
    18): one rank left load() while the others waited in the gather. It is a CheckpointLoadError like any other."""
    from stride.checkpoint.errors import CheckpointLoadError
    from stride.checkpoint.folder import CheckpointFolder

    step = tmp_path / "step_00000002"
    step.mkdir()
    (step / "manifest.json").write_text(json.dumps({"format": FORMAT, "files": files}))
    with pytest.raises(CheckpointLoadError, match="step_00000002"):
        CheckpointFolder(tmp_path).load(step, lambda keys: {})
