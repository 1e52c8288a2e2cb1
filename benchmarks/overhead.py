"""stride's trainer against a minimal hand-written PyTorch loop: same model, data, optimizer, schedule.

Both train the quick-start transformer for the same steps; they alternate `--repeats` times in one
process so machine noise hits both alike. Headline: median time ratio stride / hand-written over the
step loop (`overhead_ratio`, goal <= 1.02), with all instrumentation on (step breakdown, FLOP count,
metrics.jsonl, validation off in both). Set-up (FLOP count, run directory) is reported separately.

    python benchmarks/overhead.py [--steps 60] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch

from stride.config import load_config
from stride.data import build_data
from stride.models import build_model, make_loss
from stride.optim.factory import build_optimizer
from stride.train.device import configure_process
from stride.train.schedule import build_scheduler
from stride.train.trainer import Trainer


def _cfg(steps: int):
    return load_config("configs/quickstart.toml", [f"train.steps={steps}", "train.val_every=0",
                                                   "metrics.progress=false", "metrics.log_every=10"])


def hand_written(steps: int) -> float:
    cfg = _cfg(steps)
    configure_process(cfg.train, torch.device("cpu"))
    data = build_data(cfg.data, cfg.train.batch_size)
    model = build_model(cfg.model, data.n_features, data.seq_len, data.n_horizons)
    loss_fn = make_loss("mse")
    opt = build_optimizer(model.parameters(), cfg.optim)
    sched = build_scheduler(opt, steps, cfg.optim)
    it = iter(data.train)
    t0 = time.perf_counter()
    for _ in range(steps):
        x, y = next(it)
        loss = loss_fn(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
    return time.perf_counter() - t0


def with_stride(steps: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        s = Trainer(config=_cfg(steps), out=d).fit().summary
        return s["wall_time_s"], time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with_stride(3)  # warm caches (measured matmul peak, allocator, data) for both sides alike
    hand_written(3)
    loop_ratios, total_ratios = [], []
    for i in range(args.repeats):
        if i % 2 == 0:
            h = hand_written(args.steps)
            s_loop, s_total = with_stride(args.steps)
        else:
            s_loop, s_total = with_stride(args.steps)
            h = hand_written(args.steps)
        loop_ratios.append(s_loop / h)
        total_ratios.append(s_total / h)
        print(f"repeat {i}: hand-written {h:.3f} s, stride loop {s_loop:.3f} s (ratio {s_loop / h:.3f}), "
              f"stride incl. set-up {s_total:.3f} s")
    out = {
        "overhead_ratio": statistics.median(loop_ratios),
        "overhead_ratio_min": min(loop_ratios),
        "overhead_ratio_max": max(loop_ratios),
        "overhead_ratio_incl_setup": statistics.median(total_ratios),
        "steps": args.steps,
        "repeats": args.repeats,
        "threads": torch.get_num_threads(),
    }
    print(f"median overhead ratio stride/hand-written: {out['overhead_ratio']:.3f} (goal <= 1.02); "
          f"including set-up: {out['overhead_ratio_incl_setup']:.3f}")
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
