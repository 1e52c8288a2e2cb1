"""Runs under torchrun: the runs of several test workers in one process group, so that their test modules share
one launch per world size (tests/parallel/conftest.py) instead of one each.

argv: OUT, then PART=NAME,NAME,... for each part (correctness: parallel_worker.py, pipeline: pipeline_worker.py,
user_model: user_model.py, tp_optim: tp_optim_driver.py, rank_streams: rank_stream_worker.py, tp_mfu and layout:
summary_worker.py). Each part's runs go to OUT/PART as its own worker writes them; after a part's last run rank 0
writes OUT/PART/.done-WORLD. A run that fails ends the launch: the parts before it stay complete and their tests go
on, the others report the failure.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

WORKERS = {"correctness": "parallel_worker", "pipeline": "pipeline_worker", "user_model": "user_model",
           "tp_optim": "tp_optim_driver", "rank_streams": "rank_stream_worker", "tp_mfu": "summary_worker",
           "layout": "summary_worker"}


def main(out: str, parts: list[str]) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    for part in parts:
        key, names = part.split("=", 1)
        folder = Path(out) / key
        importlib.import_module(WORKERS[key]).run_names(folder, names.split(","))
        if dist.get_rank() == 0:
            (folder / f".done-{os.environ['WORLD_SIZE']}").write_text("")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
