"""adamw_triton under tensor parallelism updates replicated weights from their reduced gradient.

With sequence parallel (the default) a norm's weight is replicated and its gradient a `Partial(sum)`: FusedAdamW
took each rank's own term (`to_local`), so the replicas drifted apart (8.4e-4 after 5 steps at tp = 2; a review's
find). Now, as with torch's AdamW, every replica is equal and equals torch AdamW's.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

DRIVER = Path(__file__).with_name("tp_optim_driver.py")
REPO = Path(__file__).resolve().parents[2]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _norm_replicas(tmp_path: Path, optimizers: list[str]) -> dict[str, list[torch.Tensor]]:
    """Each rank's copy of the replicated weight after 5 steps, per optimizer (2 gloo ranks, one process each, as the
    checkpoint tests launch them). One launch trains with every optimizer in turn (tp_optim_driver.py): the
    processes' start-up, not the 5 steps, is what this test waits for."""
    out, port = tmp_path / "norm", str(_port())
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
               "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
        procs.append(subprocess.Popen([sys.executable, str(DRIVER), ",".join(optimizers), str(out)], env=env,
                                      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    errs = [p.communicate(timeout=240)[1] for p in procs]
    for rank, (p, err) in enumerate(zip(procs, errs, strict=True)):
        assert p.returncode == 0, f"rank {rank} exited with {p.returncode}:\n{err[-3000:]}"
    return {opt: [torch.load(f"{out}.{opt}.{rank}") for rank in range(2)] for opt in optimizers}


@pytest.mark.dist
@pytest.mark.slow
def test_adamw_triton_keeps_replicated_weights_equal_under_tp(tmp_path: Path) -> None:
    replicas = _norm_replicas(tmp_path, ["adamw", "adamw_triton"])
    ref, got = replicas["adamw"], replicas["adamw_triton"]
    assert torch.equal(ref[0], ref[1])
    assert torch.equal(got[0], got[1])  # drifted apart before (each rank used its own partial gradient)
    assert torch.allclose(got[0], ref[0], rtol=0, atol=1e-6)
    assert not torch.equal(got[0], torch.ones_like(got[0]))  # it trained
