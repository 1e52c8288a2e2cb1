"""Where a process pays torch._dynamo's import: the first FLOP count, or the optimizer's construction.

`torch.utils.flop_counter.FlopCounterMode`'s dispatch mode is wrapped in `torch._disable_dynamo`, which imports
torch._dynamo (with FSDP, DTensor and sympy) at its first call; so does every `torch.optim.Optimizer` (its
`add_param_group`, called by `__init__`, carries the same wrapper). A training process builds an optimizer either
way, so moving the import out of the count would move its cost, not remove it. This script measures that: each round
starts two fresh processes on the quick-start model (one torch thread), one counting first, one building AdamW first,
and reports process CPU seconds (steadier than wall time on a shared host), medians over the rounds.

    .venv/bin/python benchmarks/flop_count_import.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time


def _one(order: str) -> dict[str, float]:
    """One fresh process: the FLOP count and AdamW's construction in `order`, then a second count and a plain step."""
    import torch

    import stride
    from stride.metrics.flops import count_train_flops

    cfg = stride.load_config("configs/quickstart.toml", ["train.steps=2", "train.val_every=0",
                                                          f"metrics.out_dir={tempfile.mkdtemp()}"])
    tr = stride.Trainer(config=cfg, write_run_dir=False)
    x, y = next(iter(tr.train_data))
    if "torch._dynamo" in sys.modules:
        raise SystemExit("torch._dynamo was imported before the count: nothing to measure")
    torch.set_num_threads(1)
    out: dict[str, float] = {}

    def count() -> None:
        t = time.process_time()
        out["flops"] = count_train_flops(tr.model, tr.loss_fn, x, y)
        out["count_s"] = time.process_time() - t

    def optimizer() -> None:
        t = time.process_time()
        torch.optim.AdamW(tr.model.parameters())
        out["adamw_s"] = time.process_time() - t

    for f in (count, optimizer) if order == "count-first" else (optimizer, count):
        f()
    t = time.process_time()
    count_train_flops(tr.model, tr.loss_fn, x, y)
    out["count_again_s"] = time.process_time() - t
    t = time.process_time()
    tr.loss_fn(tr.model(x), y).backward()
    out["plain_step_s"] = time.process_time() - t
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--one", choices=("count-first", "opt-first"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps(_one(a.one)))
        return
    runs: dict[str, list[dict[str, float]]] = {"count-first": [], "opt-first": []}
    for _ in range(a.rounds):  # alternated
        for order in runs:
            done = subprocess.run([sys.executable, __file__, "--one", order], capture_output=True, text=True,
                                  check=True)
            runs[order].append(json.loads(done.stdout.strip().splitlines()[-1]))
    for order, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("count_s", "adamw_s", "count_again_s", "plain_step_s")}
        print(f"{order}: " + ", ".join(f"{k} {v:.3f}" for k, v in med.items())
              + f", count + adamw {med['count_s'] + med['adamw_s']:.3f} (CPU s, median of {len(rs)})")


if __name__ == "__main__":
    main()
