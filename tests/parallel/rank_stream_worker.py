"""One rank of a 2-rank run with dropout: writes its parameter hash, the dropout masks its stream draws next, and
what `max_with_rank` (the summary's peak memory over ranks) returns for a few per-rank values.

Run with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set. Usage: python rank_stream_worker.py OUT_DIR TP"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import torch

from stride.config.loader import load_config
from stride.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]


def overrides(tp: int) -> list[str]:
    """tp 0: one process; 1: two data-parallel replicas; 2: tensor parallel over two ranks."""
    parallel = [f"parallel.tp={tp}"] if tp > 1 else ["parallel.dp_replicate=2"] if tp == 1 else []
    return ["model.dropout=0.5", "data.n_steps=1024", "data.n_assets=2", "train.steps=1", "train.threads=1",
            "checkpoint.enabled=false", *parallel]


def masks_after_setup(tp: int) -> dict:
    trainer = Trainer(config=load_config(ROOT / "configs" / "quickstart.toml", overrides(tp)), write_run_dir=False)
    trainer.setup()
    weights = b"".join(p.detach().float().contiguous().numpy().tobytes() for p in trainer.model.parameters()
                       if not hasattr(p, "to_local"))
    masks = torch.nn.functional.dropout(torch.ones(256), 0.5).tolist()
    par, r = trainer.par, trainer.par.rank
    maxima = [par.max_with_rank(1000 + 500 * r), par.max_with_rank(None if r == 0 else 5), par.max_with_rank(7)]
    return {"weights": hashlib.sha256(weights).hexdigest(), "masks": masks, "max": maxima}


if __name__ == "__main__":
    out, tp = Path(sys.argv[1]), int(sys.argv[2])
    got = masks_after_setup(tp)
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(got))
