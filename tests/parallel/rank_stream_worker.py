"""One rank of a 2-rank run with dropout: writes its parameter hash, the dropout masks its stream draws next, what
`max_with_rank` (the summary's peak memory over ranks) returns for a few per-rank values, and the validation loss
right after set-up (each replica evaluates its slice of every batch).

Under torchrun, its `run_names` from combined_worker.py (the launch tests/parallel/conftest.py shares between this
package's modules): each named layout set up in turn on the one process group, every rank writing
OUT_DIR/LAYOUT.rankR.json. As a script, with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set:
python rank_stream_worker.py OUT_DIR LAYOUT[,LAYOUT...]"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

from stride.config.loader import load_config
from stride.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
LAYOUTS = {"one": [], "ddp": ["parallel.dp_replicate=2"], "fsdp": ["parallel.dp_shard=2"], "tp": ["parallel.tp=2"]}


def overrides(layout: str) -> list[str]:
    # 13 validation batches of 24 and a last one of 8: slices of 12 and 4 a replica
    return ["model.dropout=0.5", "data.n_steps=1024", "data.n_assets=2", "train.steps=1", "train.threads=1",
            "train.batch_size=24", "train.val_batches=100", "checkpoint.enabled=false", *LAYOUTS[layout]]


def after_setup(layout: str) -> dict:
    trainer = Trainer(config=load_config(ROOT / "configs" / "quickstart.toml", overrides(layout)),
                      write_run_dir=False)
    trainer.setup()
    weights = b"".join(p.detach().float().contiguous().numpy().tobytes() for p in trainer.model.parameters()
                       if not hasattr(p, "to_local"))
    masks = torch.nn.functional.dropout(torch.ones(256), 0.5).tolist()
    par, r = trainer.par, trainer.par.rank
    maxima = [par.max_with_rank(1000 + 500 * r), par.max_with_rank(None if r == 0 else 5), par.max_with_rank(7)]
    val = trainer.evaluate(trainer.wrapped)
    return {"weights": hashlib.sha256(weights).hexdigest(), "masks": masks, "max": maxima, "val": val,
            "val_sizes": [len(x) for x, _ in trainer.val_data][:100]}


def run_names(out_dir: Path, names: list[str]) -> None:
    """Each named layout in turn, on the process group already initialised; every rank writes its own file."""
    import torch.distributed as dist

    for name in names:
        got = after_setup(name)
        (out_dir / f"{name}.rank{dist.get_rank()}.json").write_text(json.dumps(got))
        dist.barrier()


def main(out: str, names: list[str]) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    run_names(Path(out), names)
    # the process groups go now, as `stride train` lets them go: left to interpreter exit, gloo's threads aborted
    # the process now and then ("terminate called without an active exception", exit -6; 1-2 of 6 runs)
    from stride.cli.train import release_process_groups

    release_process_groups()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
