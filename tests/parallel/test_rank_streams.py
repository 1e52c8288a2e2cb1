"""Each rank draws its own dropout masks once the weights are drawn (outside audit 11: every rank had one stream,
so data-parallel slices and TP head shards repeated each other's masks); rank 0 keeps the one-process stream."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from stride.train.device import seed_rank_stream

WORKER = Path(__file__).with_name("rank_stream_worker.py")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rank_streams_differ_and_rank_0_keeps_the_seed() -> None:
    draws = []
    for rank in (0, 1, 2):
        torch.manual_seed(7)
        seed_rank_stream(7, rank)
        draws.append(torch.rand(8))
    torch.manual_seed(7)
    assert torch.equal(draws[0], torch.rand(8))
    assert not torch.equal(draws[0], draws[1]) and not torch.equal(draws[1], draws[2])


@pytest.mark.dist
@pytest.mark.parametrize("tp", [1, 2])
def test_two_ranks_share_the_weights_not_the_dropout_masks(tmp_path: Path, tp: int) -> None:
    port, procs = str(_port()), []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
               "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(tmp_path), str(tp)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    if tp == 1:  # data parallel: replicas of one model (TP shards hold different slices, hashed apart)
        assert r0["weights"] == r1["weights"]
    assert r0["masks"] != r1["masks"]
    # rank 0 draws what one process draws after the same set-up
    sys.path.insert(0, str(WORKER.parent))
    try:
        from rank_stream_worker import masks_after_setup
    finally:
        sys.path.pop(0)
    env_keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    assert not any(k in os.environ for k in env_keys)
    if tp == 1:
        assert masks_after_setup(0)["masks"] == r0["masks"]
