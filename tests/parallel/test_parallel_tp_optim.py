"""adamw_triton under tensor parallelism updates replicated weights from their reduced gradient.

With sequence parallel (the default) a norm's weight is replicated and its gradient a `Partial(sum)`: FusedAdamW
took each rank's own term (`to_local`), so the replicas drifted apart (8.4e-4 after 5 steps at tp = 2; a review's
find). Now, as with torch's AdamW, every replica is equal and equals torch AdamW's.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

TINY = ["model.d_model=32", "model.n_layers=2", "model.n_heads=4", "data.n_assets=4", "data.n_steps=600",
        "data.seq_len=16", "train.batch_size=8", "train.steps=5", "train.val_every=0", "train.threads=1",
        "metrics.progress=false", "metrics.flops=false", "parallel.tp=2"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, opt: str, out: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    import torch.distributed as dist

    from stride.config import load_config
    from stride.train.trainer import Trainer

    tr = Trainer(config=load_config(overrides=[*TINY, f"optim.name={opt}"]), write_run_dir=False)
    tr.fit()
    w = dict(tr.model.named_parameters())["blocks.0.attn_norm.weight"].to_local().detach().clone()
    both = [torch.empty_like(w) for _ in range(2)]
    dist.all_gather(both, w)
    if rank == 0:
        torch.save(torch.stack(both), out)
    dist.destroy_process_group()


def _norm_replicas(tmp_path: Path, opt: str) -> torch.Tensor:
    out = str(tmp_path / f"{opt}.pt")
    port = _port()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(r, port, opt, out)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
        assert p.exitcode == 0, f"a rank exited with {p.exitcode}"
    return torch.load(out)


@pytest.mark.dist
@pytest.mark.slow
def test_adamw_triton_keeps_replicated_weights_equal_under_tp(tmp_path: Path) -> None:
    ref = _norm_replicas(tmp_path, "adamw")
    got = _norm_replicas(tmp_path, "adamw_triton")
    assert torch.equal(ref[0], ref[1])
    assert torch.equal(got[0], got[1])  # drifted apart before (each rank used its own partial gradient)
    assert torch.allclose(got[0], ref[0], rtol=0, atol=1e-6)
    assert not torch.equal(got[0], torch.ones_like(got[0]))  # it trained
