"""Save at 2 ranks (FSDP2, gloo) and load at 1 and at 4, and 1 -> 2: identical parameters and optimizer state.

World size 1 is one plain process (no process group): the test's own, as the worker's `run`."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("ckpt_reshard_worker.py")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world: int, *args: str) -> None:
    if world == 1:  # one plain process, no process group: this one (a subprocess cost a start-up of torch and DCP)
        _in_this_process(*args)
        return
    port = str(_port())
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1",
               "PYTHONWARNINGS": "ignore", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
        procs.append(subprocess.Popen([sys.executable, str(WORKER), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]


def _in_this_process(mode: str, ckpt: str, out_json: str) -> None:
    """The worker's `run` at world size 1, as its own process ran it (one thread, warnings ignored), leaving this one's
    torch RNG and thread count as they were."""
    import warnings

    import torch

    sys.path.insert(0, str(WORKER.parent))
    try:
        from ckpt_reshard_worker import run
    finally:
        sys.path.remove(str(WORKER.parent))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DCP's "assuming the intent is to save in a single process"
            run(mode, Path(ckpt), Path(out_json))
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def saves(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Path]:
    """One save per saving world size, made on first use and shared: 2 -> 1 and 2 -> 4 load the same 2-rank
    save (same seed, same two steps: it would be byte-for-byte the same checkpoint written twice), which
    saves one 2-process launch. Each test loads a copy of it in its own folder."""
    made: dict[int, Path] = {}

    def save(world: int) -> Path:
        if world not in made:
            folder = tmp_path_factory.mktemp(f"saved_at_{world}")
            run_ranks(world, "save", str(folder / "ckpt"), str(folder / "saved.json"))
            made[world] = folder
        return made[world]

    return save


@pytest.mark.dist
@pytest.mark.slow
@pytest.mark.parametrize(("save_world", "load_world"), [(2, 1), (2, 4), (1, 2)])
def test_resharded_load_is_exact(tmp_path: Path, saves: Callable[[int], Path], save_world: int,
                                 load_world: int) -> None:
    saved_dir = saves(save_world)
    ckpt = tmp_path / "ckpt"
    shutil.copytree(saved_dir / "ckpt", ckpt)
    manifest = json.loads((ckpt / "step_00000002" / "manifest.json").read_text())
    assert manifest["world_size"] == save_world
    shard_ranks = {int(f[2:].split("_")[0]) for f in manifest["files"] if f.endswith(".distcp")}
    assert shard_ranks == set(range(save_world))  # every rank wrote its own shard files
    run_ranks(load_world, "load", str(ckpt), str(tmp_path / "loaded.json"))
    saved = json.loads((saved_dir / "saved.json").read_text())
    loaded = json.loads((tmp_path / "loaded.json").read_text())
    assert len(saved) == 6 + 6 * 3  # 3 Linear layers: 6 tensors, each with AdamW step, exp_avg, exp_avg_sq
    assert loaded == saved
