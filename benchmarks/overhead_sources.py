"""Each per-step source of stride's trainer host work, timed alone (CPU microseconds, one thread).

What the loop runs for each source, in a tight loop, median of repetitions (a CPU-time microbenchmark
is steady on a shared host where step times are not). The same script measured the trainer before
this change (`PYTHONPATH=<old tree> .venv/bin/python benchmarks/overhead_sources.py`): where the loop changed,
the source's entry is what each version runs. `one_linear_model_*`: the whole of it, the fit loop's body
against a hand-written step on a one-Linear model (compute ~0, so what remains is the trainer), in
alternated blocks on the same objects: CPU microseconds a step. (Separate runs of each differed by
+-60 us from run to run here; blocks in one process by a few.)

    .venv/bin/python benchmarks/overhead_sources.py [--json]
"""

from __future__ import annotations

import inspect
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import torch

from stride.checkpoint.rerun import open_run_folder
from stride.config import load_config
from stride.data.build import build_synthetic
from stride.metrics.observe.system import SystemSampler
from stride.metrics.step_timer import StepTimer
from stride.models import make_loss
from stride.optim.factory import build_optimizer
from stride.train import trainer as trmod
from stride.train.progress import TrainProgress
from stride.train.schedule import build_scheduler
from stride.train.summary import LoopTally

NEW = hasattr(trmod, "phase_range")  # the trainer after the hot-path change
# Since the divergence check the loop hands each step's loss to Trainer._losses and _log_step reads it
# from there (it took the loss as an argument before).
LOSS_WATCH = "loss" not in inspect.signature(trmod.Trainer._log_step).parameters
# Since audit 13 (M3) the step's timing counts the batch it trained (its length), as the loop passes it
ROWS = "rows" in inspect.signature(trmod.Trainer._end_step_timing).parameters


def cpu_us(fn, n: int, reps: int = 15) -> float:  # noqa: ANN001
    out = []
    for _ in range(reps):
        c0 = time.thread_time()
        for _ in range(n):
            fn()
        out.append((time.thread_time() - c0) / n * 1e6)
    return statistics.median(out)


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(7, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x[:, -1])


def _cfg(steps: int = 10, *extra: str):  # noqa: ANN202
    return load_config("configs/quickstart.toml", ["train.val_every=0", "metrics.progress=false", "train.threads=1",
                                                   "metrics.flops=false", "data.prefetch=0", f"train.steps={steps}",
                                                   *extra])


def _silenced_live_bar(total: int) -> tuple[TrainProgress, int, int]:
    os.environ["FORCE_COLOR"] = "1"  # rich: a terminal
    err, dn = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(dn, 2)
    return TrainProgress(total, True), err, dn


def per_source() -> dict[str, float]:
    torch.set_num_threads(1)
    c = _cfg()
    data = build_synthetic(c.data, 64)
    tr = trmod.Trainer(Tiny(), data.train, None, c, out=tempfile.mkdtemp())
    tr.run_dir = open_run_folder(tr.cfg, tr.out, tr.overwrite)  # what fit() opens first
    tr.setup()
    tally, res = LoopTally(t_start=time.perf_counter()), {}
    timer = StepTimer(torch.device("cpu"))

    def timer_step() -> None:
        timer.start_step()
        for p in ("data", "forward", "backward", "optimizer"):
            timer.mark(p)
        timer.end_step(record=True)

    res["step timer (start, 4 marks, end)"] = cpu_us(timer_step, 2000)
    rng = trmod.phase_range if NEW else trmod.record_function

    def ranges() -> None:
        for p in ("stride.data", "stride.forward", "stride.backward", "stride.optimizer"):
            with rng(p):
                pass

    res["profiler ranges (4 a step)"] = cpu_us(ranges, 2000)
    w, xx = torch.randn(3, requires_grad=True), torch.randn(3)

    def bare() -> None:
        (w * xx).sum().backward()

    def bookkeeping() -> None:  # what each version does around one micro-step's loss
        if NEW:
            loss = (w * xx).sum()
            loss.backward()
            loss.detach()
        else:
            s = torch.zeros(())
            loss = (w * xx).sum() / 1
            loss.backward()
            s += loss.detach()

    res["loss bookkeeping (zeros, / accum, +=, DivBackward)"] = max(0.0, cpu_us(bookkeeping, 2000) - cpu_us(bare, 2000))

    def contexts() -> None:
        with (tr.par.grad_sync(True) if not NEW or tr.par.enabled else trmod._NULL), tr.precision.autocast():
            pass

    res["contexts (grad sync, autocast)"] = cpu_us(contexts, 5000)
    batch = next(iter(data.train))
    res["device move (2 no-op .to)"] = cpu_us(lambda: tr._to_device(batch), 5000)
    prog, loss = TrainProgress(10**9, False), torch.tensor(1.3)
    tr.timer.start_step()
    for p in ("data", "forward", "backward", "optimizer"):
        tr.timer.mark(p)
    parts = tr.timer.end_step()

    def log_step() -> None:
        tr.step = 10
        if LOSS_WATCH:
            tr._losses.add(tr.step, loss)
            tr._log_step(parts, tally, prog)
        else:
            tr._log_step(loss, parts, tally, prog)

    res["log step / 10 (float, dict, metrics.jsonl)"] = cpu_us(log_step, 500) / 10
    tr.history.clear()
    sampler = SystemSampler(1.0)
    res["system sampler: one sample, per second"] = cpu_us(sampler.sample, 200)
    bar, err, dn = _silenced_live_bar(10**9)
    try:
        k = [0]

        def advance() -> None:
            k[0] += 1
            bar.advance(k[0])

        res["progress bar advance (live terminal)"] = cpu_us(advance, 2000)
        c0, t0 = time.process_time(), time.perf_counter()
        time.sleep(3)
        res["progress bar background redraw, CPU us per second"] = (time.process_time() - c0) / (
            time.perf_counter() - t0) * 1e6
        bar.close()
    finally:
        os.dup2(err, 2)
        os.close(err)
        os.close(dn)
        os.environ.pop("FORCE_COLOR", None)
    for depth in (0, 2):
        d = build_synthetic(c.data, 64)
        d.train.prefetch = depth
        out = []
        for _ in range(7):
            it = iter(d.train)
            next(it)
            c0 = time.process_time()
            for _ in range(50):
                next(it)
            out.append((time.process_time() - c0) / 50 * 1e6)
            it.close()
        res[f"quick-start loader, prefetch {depth}: process CPU a batch"] = statistics.median(out)
    return res


def whole_step(blocks: int = 40, per_block: int = 100) -> dict[str, float]:
    """The fit loop's body against a hand-written step, on the same model, optimizer and loader, alternated in
    blocks of `per_block` steps: CPU microseconds a step (one thread; the system sampler not running)."""
    torch.set_num_threads(1)
    c = _cfg(10**9, "model.name=mlp", "data.seq_len=8", "train.batch_size=8")
    d = build_synthetic(c.data, 8)
    d.train.prefetch = 0
    tr = trmod.Trainer(Tiny(), d.train, None, c, out=tempfile.mkdtemp())
    tr.run_dir = open_run_folder(tr.cfg, tr.out, tr.overwrite)  # what fit() opens first
    tr.setup()
    tally, prog, rng = LoopTally(t_start=time.perf_counter()), TrainProgress(10**9, False), \
        (trmod.phase_range if NEW else trmod.record_function)
    loss_fn, it, net = make_loss("mse"), iter(d.train), Tiny()
    opt = build_optimizer(net.parameters(), c.optim)
    sched = build_scheduler(opt, 10**9, c.optim)

    def bare() -> None:
        x, y = next(it)
        loss = loss_fn(net(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()

    def stride() -> None:  # Trainer.fit's loop body, as both versions have it
        tr.timer.start_step()
        tr.par.begin_step(tr.step + 1)
        with rng("stride.data"):
            x, y = tr.next_batch()
        tr.timer.mark("data")
        loss_sum = tr.train_step(x, y)
        tr.step += 1
        parts = tr._end_step_timing(tally, x.shape[0]) if ROWS else tr._end_step_timing(tally)
        prog.advance(tr.step)
        if LOSS_WATCH:
            tr._losses.add(tr.step, loss_sum)
            tr._log_step(parts, tally, prog)
        else:
            tr._log_step(loss_sum, parts, tally, prog)
        tr._validate(tally)
        for cb in tr._step_enders:
            cb.on_step_end(tr)

    ways: dict[str, list[float]] = {"loop": [], "stride": []}
    for b in range(blocks):
        for name in (("loop", "stride") if b % 2 == 0 else ("stride", "loop")):
            fn = bare if name == "loop" else stride
            c0 = time.thread_time()
            for _ in range(per_block):
                fn()
            ways[name].append((time.thread_time() - c0) / per_block * 1e6)
    loop, st = statistics.median(ways["loop"]), statistics.median(ways["stride"])
    return {"one_linear_model_loop_cpu_us_per_step": loop, "one_linear_model_stride_cpu_us_per_step": st,
            "one_linear_model_stride_minus_loop_us": st - loop}


def sources() -> dict[str, Any]:
    return {"tree": trmod.__file__, "sources_us": per_source(), **whole_step()}


def print_sources(out: dict[str, Any], file: Any = None) -> None:
    """The per-source table (docs/overhead.md) and the one-Linear model's whole step (to `file`, else stdout)."""
    for k, v in out["sources_us"].items():
        print(f"{k:60s} {v:9.2f} us", file=file)
    print(f"one-Linear model, CPU us a step: loop {out['one_linear_model_loop_cpu_us_per_step']:.1f}, stride "
          f"{out['one_linear_model_stride_cpu_us_per_step']:.1f} (+{out['one_linear_model_stride_minus_loop_us']:.1f})",
          file=file)
    print(f"tree {out['tree']}, load {os.getloadavg()}", file=file)


if __name__ == "__main__":
    out = sources()
    print_sources(out, sys.stderr if "--json" in sys.argv else None)  # with --json, stdout is the JSON alone
    if "--json" in sys.argv:
        print(json.dumps(out))
