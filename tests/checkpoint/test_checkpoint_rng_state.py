"""A checkpoint's RNG states and data position are input: checked before any is applied (audit 14, H1 and L10).

NumPy's legacy MT19937 takes any position: a resealed checkpoint whose `numpy_meta` position was 10**9 made the
resumed process read past the 624-word key and segfault at its first `np.random` draw (below ~1000 the reads fed
heap bytes into the "random" numbers); a bad Python index was a ValueError traceback after the weights were
loaded; a data position of 10**15 resumed without a word. Each is now a reason to skip that checkpoint, and the
resume takes the older valid one (the run then matches an uninterrupted one bit for bit).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from ckpt_helpers import Crash, CrashAt, fit, reference_sha

from stride.checkpoint.manifest import write_manifest
from stride.checkpoint.rng import capture_rng, restore_rng, rng_problem


@pytest.fixture(scope="module")
def ref() -> str:
    return reference_sha()


def _set(key: str, index: int, value: float) -> Callable[[dict[str, Any]], None]:
    def edit(rng: dict[str, Any]) -> None:
        rng[key][index] = value

    return edit


def _torch_cpu_zeros(rng: dict[str, Any]) -> None:
    rng["torch_cpu"].zero_()  # an MT19937 state torch's own check refuses ("Invalid mt19937 state")


RNG_DAMAGE = [
    (_set("numpy_meta", 0, 700), "rng.numpy_meta pos 700 is not 0..624"),  # no crash: it read the heap
    (_set("numpy_meta", 0, -1), "rng.numpy_meta pos -1 is not 0..624"),
    (_set("numpy_meta", 1, 5), "rng.numpy_meta has_gauss 5 is not 0 or 1"),
    (_set("numpy_key", 3, 2**40), "rng.numpy_key holds 1099511627776, not a 32-bit word"),
    (_set("numpy_gauss", 0, float("nan")), "rng.numpy_gauss holds [nan], not finite numbers"),
    (_set("python_state", -1, 10**9), "rng.python_state index 1000000000 is not 0..624"),
    (_set("python_state", 0, 2), "rng.python_state version 2 is not Python's random state version 3"),
    (_set("python_state", 5, -3), "rng.python_state holds -3, not a 32-bit word"),
    (_set("python_gauss", 0, 0.5), "rng.python_gauss flag 0.5 is not 0 or 1"),
    (_torch_cpu_zeros, "rng.torch_cpu is not a torch CPU generator state (Invalid mt19937 state)"),
]


@pytest.mark.parametrize(("damage", "reason"), RNG_DAMAGE)
def test_rng_problem_names_each_state_stride_never_writes(damage, reason: str) -> None:
    rng = capture_rng()
    assert rng_problem(rng) is None
    damage(rng)
    assert rng_problem(rng) == reason


@pytest.mark.parametrize(("key", "bad"), [
    ("numpy_key", torch.zeros(623, dtype=torch.int64)),
    ("numpy_meta", torch.zeros(2, dtype=torch.float64)),
    ("torch_cpu", torch.zeros(16, dtype=torch.uint8)),
    ("python_state", torch.zeros((2, 313), dtype=torch.int64)),
])
def test_rng_problem_names_a_state_of_another_shape_or_dtype(key: str, bad: torch.Tensor) -> None:
    rng = {**capture_rng(), key: bad}
    assert rng_problem(rng).startswith(f"rng.{key} is a {bad.dtype} tensor of shape {tuple(bad.shape)}, not the ")
    assert rng_problem({k: v for k, v in capture_rng().items() if k != key}) == f"rng.{key} is missing"


def test_restore_rng_refuses_a_bad_state_before_setting_any_generator() -> None:
    rng = capture_rng()
    rng["numpy_meta"][0] = 10**9
    random.seed(1)
    np.random.seed(1)
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    with pytest.raises(ValueError, match=r"rng.numpy_meta pos 1000000000 is not 0..624"):
        restore_rng(rng)
    assert random.getstate() == before[0]  # Python's generator comes first in restore_rng: untouched
    assert (np.random.get_state()[1] == before[1]).all() and torch.equal(torch.get_rng_state(), before[2])


def _rewrite(folder: Path, step: int, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite a checkpoint's state with DCP and reseal its manifest: what anyone who can write the folder can do."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    flat = folder.parent / "flat.pt"
    dcp_to_torch_save(folder, flat)
    state = torch.load(flat, weights_only=False)  # the test's own file
    flat.unlink()
    edit(state)
    meta, old = (folder / "meta.json").read_bytes(), json.loads((folder / "manifest.json").read_text())
    for p in folder.iterdir():
        p.unlink()
    dcp.save(state, checkpoint_id=str(folder), no_dist=True)
    (folder / "meta.json").write_bytes(meta)
    write_manifest(folder, step, {k: old[k] for k in ("config_hash", "world_size", "lineage")})


def _rng(damage: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    return lambda state: damage(state["rank0"]["rng"])


def _data(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def edit(state: dict[str, Any]) -> None:
        position = json.loads(state["rank0"]["data"])
        if "batches" in changes:
            position = {"kind": "replay", "batches": changes["batches"]}
        else:
            position["state"].update(changes)
        state["rank0"]["data"] = json.dumps(position)

    return edit


@pytest.mark.parametrize(("edit", "reason"), [
    (_rng(_set("numpy_meta", 0, 700)), "rank 0's rng.numpy_meta pos 700 is not 0..624"),
    (_rng(_set("python_state", -1, 10**9)), "rank 0's rng.python_state index 1000000000 is not 0..624"),
    (_rng(_torch_cpu_zeros), "rank 0's rng.torch_cpu is not a torch CPU generator state"),
    (_data(position=10**15), "rank 0's data position is batch 1000000000000000 of an epoch, past its end"),
    (_data(epoch=10**15), "rank 0's data position is at epoch 1000000000000000, more than 6 steps"),
    (_data(batches=10**12), "rank 0's data position replays 1000000000000 batches, more than the 6 steps taken"),
])
def test_a_resealed_checkpoint_with_a_bad_rng_state_or_data_position_is_skipped(tmp_path: Path, ref: str, edit,
                                                                                 reason: str, capsys) -> None:
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, callbacks=[CrashAt(7)])  # saves at 3 and 6
    _rewrite(out / "checkpoints" / "step_00000006", 6, edit)
    s = fit(out)
    err = capsys.readouterr().err
    assert s["checkpoint"]["resumed_from"] == "step_00000003", err
    assert f"could not load step_00000006 ({reason}" in err, err
    assert s["params_sha256"] == ref  # nothing of the refused checkpoint was applied


def test_a_cuda_state_is_checked_for_its_kind_even_without_that_device() -> None:
    """Where the device is here, a scratch CUDA generator also checks its size and Philox offset (rng_problem)."""
    rng = capture_rng()
    assert rng_problem({**rng, "cuda_7": torch.zeros(16, dtype=torch.float32)}) == \
        "rng.cuda_7 is not a uint8 tensor of a CUDA generator state"
    assert rng_problem({**rng, "cuda_x": torch.zeros(16, dtype=torch.uint8)}) == \
        "rng.cuda_x is not a CUDA device's state"
    if torch.cuda.device_count() <= 7:  # no such device: only its kind is checked (restore_rng notes it, sets none)
        assert rng_problem({**rng, "cuda_7": torch.zeros(16, dtype=torch.uint8)}) is None
