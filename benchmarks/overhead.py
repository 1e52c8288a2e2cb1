"""stride's trainer against a hand-written PyTorch loop, Lightning and Accelerate: same model, batches, optimizer.

Each framework trains the same model (the quick-start transformer: 98k parameters, batch 64; and the
benchmark suite's `mlp_tiny`: batch 256, window 8) from the same initial weights on the same batches
(stride's loader, as the host probe set it up) with the same AdamW, schedule and gradient clipping, so
all end at the same loss (checked). They alternate in shuffled order for `--rounds` rounds in one
process, so machine noise hits them alike; medians. The headline, `overhead_ratio` (goal <= 1.02):
stride's median wall time over the timed steps (after `--skip` warm-up steps) / the hand-written
loop's, with stride's default instrumentation on (step breakdown, FLOP count, metrics.jsonl, system
sampler, run directory; validation off in all). `_cpu`: the same with the process' CPU time (every
thread: background samplers and prefetch count), steadier on a shared host. Lightning (2.6, logger,
checkpointing, progress bar and model summary off) and Accelerate (CPU, its prepared model, optimizer
and scheduler) are columns where they import (`pip install -e '.[bench-compare]'`).

`--sources`: each per-step source of the trainer's own host work, timed alone in a tight loop (CPU
microseconds, one thread), and the whole of it: stride minus the loop on a model of one Linear layer
(compute ~0, so what remains is the trainer). docs/overhead.md has the table.

    .venv/bin/python benchmarks/overhead.py [--models quick,mlp_tiny] [--rounds 6] [--threads 2] [--json] [--sources]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any

import torch

from stride.bench.stats import bootstrap_ci
from stride.config import load_config
from stride.data import build_data
from stride.models import build_model, make_loss
from stride.optim.factory import build_optimizer
from stride.train.batches import endless
from stride.train.callbacks import Callback
from stride.train.device import configure_process
from stride.train.schedule import build_scheduler
from stride.train.trainer import Trainer

MODELS = {  # the quick-start config, and the benchmark suite's mlp_tiny workload on top of it
    "quick": [],
    "mlp_tiny": ["model.name=mlp", "model.size=tiny", "data.seq_len=8", "train.batch_size=256"],
}
STEPS = {"quick": 40, "mlp_tiny": 160}


def _cfg(model: str, steps: int, threads: int, extra: tuple[str, ...] = ()):  # noqa: ANN202
    return load_config("configs/quickstart.toml", [*MODELS[model], f"train.steps={steps}", "train.val_every=0",
                                                   "metrics.progress=false", "metrics.log_every=10",
                                                   f"train.threads={threads}", *extra])


def _setup(cfg):  # noqa: ANN001, ANN202
    """Data, model, loss, optimizer and schedule in the trainer's order, so the weights and batches are its own."""
    configure_process(cfg.train, torch.device("cpu"))
    data = build_data(cfg.data, cfg.train.batch_size, torch.device("cpu"))
    model = build_model(cfg.model, data.n_features, data.seq_len, data.n_horizons)
    opt = build_optimizer(model.parameters(), cfg.optim)
    return data, model, make_loss(cfg.model.loss), opt, build_scheduler(opt, cfg.train.steps, cfg.optim)


class _Clock:
    """Wall and process CPU time from the start of timed step `skip` to the end of the last."""

    def __init__(self, skip: int) -> None:
        self.skip, self.t0, self.c0, self.t1, self.c1 = skip, 0.0, 0.0, 0.0, 0.0

    def tick(self, done: int) -> None:
        if done == self.skip:
            self.t0, self.c0 = time.perf_counter(), time.process_time()
        self.t1, self.c1 = time.perf_counter(), time.process_time()

    def result(self, loss: float) -> tuple[float, float, float]:
        return self.t1 - self.t0, self.c1 - self.c0, loss


def hand_written(model: str, steps: int, threads: int, skip: int) -> tuple[float, float, float]:
    cfg = _cfg(model, steps, threads)
    data, net, loss_fn, opt, sched = _setup(cfg)
    clock, it = _Clock(skip), (b for _, b in endless(data.train))
    clock.tick(0)
    for i in range(steps):
        x, y = next(it)
        loss = loss_fn(net(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.train.grad_clip, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        clock.tick(i + 1)
    return clock.result(float(loss.detach()))


class _StrideClock(Callback):
    def __init__(self, clock: _Clock) -> None:
        self.clock = clock

    def on_fit_start(self, trainer) -> None:  # noqa: ANN001
        self.clock.tick(0)

    def on_step_end(self, trainer) -> None:  # noqa: ANN001
        self.clock.tick(trainer.step)


def with_stride(model: str, steps: int, threads: int, skip: int) -> tuple[float, float, float]:
    clock = _Clock(skip)
    with tempfile.TemporaryDirectory() as d:
        s = Trainer(config=_cfg(model, steps, threads), out=d, callbacks=[_StrideClock(clock)]).fit().summary
    return clock.result(s["final_train_loss"])


def with_lightning(model: str, steps: int, threads: int, skip: int) -> tuple[float, float, float]:
    import lightning as L  # noqa: N812

    cfg = _cfg(model, steps, threads)
    data, net, loss_fn, opt, sched = _setup(cfg)
    clock, last = _Clock(skip), [0.0]

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN201
            loss = loss_fn(self.net(batch[0]), batch[1])
            last[0] = loss
            return loss

        def configure_optimizers(self):  # noqa: ANN201
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    class Timing(L.Callback):
        def on_train_start(self, trainer, module) -> None:  # noqa: ANN001
            clock.tick(0)

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
            clock.tick(trainer.global_step)

    trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, gradient_clip_val=cfg.train.grad_clip,
                        gradient_clip_algorithm="norm", num_sanity_val_steps=0, limit_val_batches=0,
                        callbacks=[Timing()])
    trainer.fit(Module(), train_dataloaders=data.train)
    return clock.result(float(last[0].detach()))


def with_accelerate(model: str, steps: int, threads: int, skip: int) -> tuple[float, float, float]:
    from accelerate import Accelerator

    cfg = _cfg(model, steps, threads)
    data, net, loss_fn, opt, sched = _setup(cfg)
    acc = Accelerator(cpu=True)
    net, opt, sched = acc.prepare(net, opt, sched)
    clock, it = _Clock(skip), (b for _, b in endless(data.train))
    clock.tick(0)
    for i in range(steps):
        x, y = next(it)
        loss = loss_fn(net(x), y)
        acc.backward(loss)
        acc.clip_grad_norm_(net.parameters(), cfg.train.grad_clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        clock.tick(i + 1)
    return clock.result(float(loss.detach()))


FRAMEWORKS = {"loop": hand_written, "stride": with_stride, "lightning": with_lightning, "accelerate": with_accelerate}


def available() -> dict[str, str]:
    """Framework -> '' where it imports, else why not."""
    out = {"loop": "", "stride": ""}
    for name, mod in (("lightning", "lightning"), ("accelerate", "accelerate")):
        try:
            __import__(mod)
            out[name] = ""
        except ImportError as exc:
            out[name] = f"not installed ({exc}); pip install -e '.[bench-compare]'"
    return out


def compare(models: list[str], rounds: int, threads: int, skip: int = 5, log=print,  # noqa: ANN001
            frameworks: tuple[str, ...] = tuple(FRAMEWORKS), steps: dict[str, int] | None = None) -> dict[str, Any]:
    """Alternated, shuffled rounds of every framework on every model; medians and ratios to the hand loop."""
    steps = {**STEPS, **(steps or {})}
    have = available()
    runs = [(m, f) for m in models for f in FRAMEWORKS if not have[f] and f in {"loop", "stride", *frameworks}]
    for m, f in runs:  # warm-up: the probe's cache, allocator, imports
        FRAMEWORKS[f](m, skip + 3, threads, skip)
    res: dict[tuple[str, str], list[tuple[float, float, float]]] = {r: [] for r in runs}
    rng = random.Random(0)
    for r in range(rounds):
        rng.shuffle(runs)
        for m, f in runs:
            res[m, f].append(FRAMEWORKS[f](m, steps[m], threads, skip))
        log(f"round {r}: " + ", ".join(f"{m}/{f} {res[m, f][-1][0]:.2f}s" for m, f in sorted(runs)))
    skipped = {f: have[f] or "not requested (--frameworks)" for f in FRAMEWORKS if f not in {f for _, f in runs}}
    out: dict[str, Any] = {"threads": threads, "rounds": rounds, "skipped": skipped}
    for m in models:
        tag = "" if m == "quick" else f"_{m}"
        wall = {f: statistics.median(v[0] for v in res[m, f]) for f in FRAMEWORKS if (m, f) in res}
        cpu = {f: statistics.median(v[1] for v in res[m, f]) for f in FRAMEWORKS if (m, f) in res}
        per_round = [s[0] / h[0] for s, h in zip(res[m, "stride"], res[m, "loop"], strict=True)]
        out[f"overhead_ratio{tag}"] = wall["stride"] / wall["loop"]
        out[f"overhead_ratio{tag}_cpu"] = cpu["stride"] / cpu["loop"]
        out[f"overhead_ratio{tag}_range"] = [min(per_round), max(per_round)]
        # paired: each round's stride / loop (the two ran back to back, so a slow minute hits both), with a
        # bootstrap interval: says whether the rounds can resolve the 2 % goal at all
        out[f"overhead_ratio{tag}_paired"] = statistics.median(per_round)
        out[f"overhead_ratio{tag}_paired_ci95"] = list(bootstrap_ci(per_round))
        for f in ("lightning", "accelerate"):  # null where not run (`skipped` says why), never a ratio of 0
            out[f"{f}_ratio{tag}"] = wall[f] / wall["loop"] if f in wall else None
            out[f"{f}_ratio{tag}_cpu"] = cpu[f] / cpu["loop"] if f in wall else None
        out[f"ahead_of_lightning{tag}"] = wall["stride"] < wall["lightning"] if "lightning" in wall else None
        out[f"steps{tag}"] = steps[m]
        out[f"ms_per_step{tag}"] = {f: w / (steps[m] - skip) * 1e3 for f, w in wall.items()}
        out[f"cpu_ms_per_step{tag}"] = {f: c / (steps[m] - skip) * 1e3 for f, c in cpu.items()}
        losses = {f: res[m, f][-1][2] for f in wall}
        out[f"final_loss{tag}"] = losses
        out[f"same_final_loss{tag}"] = max(losses.values()) - min(losses.values()) <= 1e-6 * abs(losses["loop"])
    return out


def summary_line(m: str, out: dict[str, Any]) -> str:
    """One model's line; a framework that did not run says so and why (it printed `lightning/loop 0.000`)."""
    tag = "" if m == "quick" else f"_{m}"
    ms = {k: round(v, 2) for k, v in out[f"ms_per_step{tag}"].items()}
    others = [f"{f}/loop {r:.3f}" if (r := out.get(f"{f}_ratio{tag}")) is not None
              else f"{f}/loop not run ({out['skipped'].get(f, 'no result')})" for f in ("lightning", "accelerate")]
    lo, hi = out[f"overhead_ratio{tag}_paired_ci95"]
    return (f"{m}: stride/loop {out[f'overhead_ratio{tag}']:.3f} wall (goal <= 1.02), "
            f"{out[f'overhead_ratio{tag}_cpu']:.3f} CPU; {'; '.join(others)}; ms a step {ms}; paired "
            f"{out[f'overhead_ratio{tag}_paired']:.3f} (95% CI {lo:.3f}-{hi:.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="quick,mlp_tiny")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", default="", help="steps per run, e.g. mlp_tiny=800 (default quick=40, mlp_tiny=160): "
                    "longer runs resolve a smaller ratio")
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="columns (loop and stride always run)")
    ap.add_argument("--sources", action="store_true", help="the per-source table instead (docs/overhead.md)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from stride.data.probe import cpu_name

    host = {"cpu": cpu_name(), "cores": len(os.sched_getaffinity(0)), "load_before": os.getloadavg()}
    if args.sources:
        from overhead_sources import print_sources, sources  # noqa: PLC0415 (beside this file)

        out = {**sources(), **host}
        print_sources(out, sys.stderr if args.json else None)  # with --json, stdout is the JSON alone
    else:
        steps = {k: int(v) for k, v in (kv.split("=") for kv in args.steps.split(",") if kv)}
        # with --json, stdout is the JSON alone (progress and summaries to stderr), so it can be piped
        say = functools.partial(print, file=sys.stderr if args.json else sys.stdout)
        out = {**compare(args.models.split(","), args.rounds, args.threads,
                         frameworks=tuple(args.frameworks.split(",")), steps=steps, log=say), **host}
        for m in args.models.split(","):
            say(summary_line(m, out))
    out["load_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
