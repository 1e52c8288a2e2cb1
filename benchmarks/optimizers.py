"""stride's optimizers side by side with torch's fused AdamW and the ecosystem's 8-bit AdamWs.

Compared, in one run: stride `adamw8bit`, `adafactor` and `adamw_triton` (its torch path off CUDA),
`torch.optim.AdamW(fused=True)`, torchao's `AdamW8bit` and bitsandbytes' `AdamW8bit` (each where it
imports; otherwise a row with the reason). Install the last two with `pip install -e ".[compare]"`.

For each optimizer:
- step time: one `step()` on a parameter set (default 8.4M values: 8 x [1024, 1024] + 16 x [1024]),
  the optimizers alternated rep by rep, median after warm-up (CUDA-synchronised on a GPU);
- state bytes per parameter (`stride.optim.state.optimizer_state_bytes`): every state tensor, the
  parts of tensor subclasses (torchao) counted, tensors shared between parameters (bitsandbytes'
  quantisation maps) counted once;
- drift: after N steps on the same gradient sequence, ||p - p_adamw|| / ||p_adamw - p_0||, where
  p_adamw is fp32 `torch.optim.AdamW` (for-loop): the error as a fraction of the distance travelled.
  Three gradient sequences: `drift` (betas (0.9, 0.95), 60 steps, a persistent direction plus noise,
  one scale per tensor), `drift_b2` (the same with beta2 = 0.999 over 200 steps: small per-step
  changes of v, where deterministic rounding can stall) and `drift_heavy` (per-element log-normal
  scales, so one 256-block spans decades, and 30% of rows without gradient each step, 100 steps);
- final validation loss on the reference workload (the default config: `ts_transformer` tiny, 200
  steps, warmup + cosine, 1 thread) through stride's Trainer, the optimizer chosen by name
  (torchao/bitsandbytes registered under a benchmark-only name), with the trainer's optimizer-phase
  and whole-step medians.

    .venv/bin/python benchmarks/optimizers.py [--json] [--quick] [--baseline REV]

`--baseline REV` adds a row for stride's 8-bit AdamW as it was at git revision REV (its
stride/optim/adamw8bit.py loaded from `git show`), for before/after figures from one run.

Timings on a shared CPU are noisy: read ratios and quote the load average printed with the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stride.optim import factory  # noqa: E402
from stride.optim.state import optimizer_state_bytes  # noqa: E402

Maker = Callable[[list[torch.Tensor], float], torch.optim.Optimizer]
INSTALL = "pip install -e '.[compare]'"
HP = {"betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.01}


@dataclass
class Row:
    name: str
    step_ms: float | None = None
    ratio_vs_fused: float | None = None  # step time / torch fused AdamW's
    state_bytes_per_param: float | None = None
    drift: float | None = None
    drift_b2: float | None = None  # beta2 = 0.999, 200 steps
    drift_heavy: float | None = None  # heavy-tailed blocks, sparse rows
    val_loss: float | None = None
    val_vs_adamw: float | None = None  # relative difference of the final validation loss
    train_opt_ms: float | None = None  # the trainer's optimizer phase, median per step
    train_step_ms: float | None = None
    note: str = ""


def _quiet_import(module: str):
    """torchao and bitsandbytes print warnings about optional native parts at import: keep stdout clean."""
    import contextlib
    import importlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return importlib.import_module(module)


def candidates() -> tuple[dict[str, Maker], dict[str, str]]:
    """name -> maker(params, lr) for everything importable, and name -> why not for the rest."""
    from stride.optim.adafactor import Adafactor
    from stride.optim.adamw8bit import AdamW8bit
    from stride.optim.adamw_fused_triton import FusedAdamW

    makers: dict[str, Maker] = {
        "torch_adamw_fused": lambda ps, lr: torch.optim.AdamW(ps, lr=lr, fused=True, **HP),
        # torch's foreach AdamW: what `optim.impl = "foreach"` runs, against the fused default (README's ratio)
        "torch_adamw_foreach": lambda ps, lr: torch.optim.AdamW(ps, lr=lr, foreach=True, **HP),
        "stride_adamw_triton": lambda ps, lr: FusedAdamW(ps, lr=lr, **HP),
        "stride_adamw8bit": lambda ps, lr: AdamW8bit(ps, lr=lr, **HP),
        "stride_adafactor": lambda ps, lr: Adafactor(ps, lr=lr, betas=HP["betas"], weight_decay=HP["weight_decay"]),
    }
    skipped: dict[str, str] = {}
    try:
        ao = _quiet_import("torchao.optim")
        makers["torchao_adamw8bit"] = lambda ps, lr: ao.AdamW8bit(ps, lr=lr, **HP)
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available here"
        skipped["torchao_adamw8bit"] = f"torchao does not import ({type(exc).__name__}: {exc}); {INSTALL}"
    try:
        bnb = _quiet_import("bitsandbytes.optim")
        makers["bnb_adamw8bit"] = lambda ps, lr: bnb.AdamW8bit(ps, lr=lr, **HP)
    except Exception as exc:  # noqa: BLE001
        skipped["bnb_adamw8bit"] = f"bitsandbytes does not import ({type(exc).__name__}: {exc}); {INSTALL}"
    return makers, skipped


def baseline_maker(rev: str) -> Maker:
    """stride's AdamW8bit as of git revision `rev` (its module file from `git show`, executed here)."""
    import importlib.util
    import subprocess
    import tempfile
    import types

    root = Path(__file__).resolve().parents[1]
    folder = Path(tempfile.mkdtemp())

    def load(module: str, replace: dict[str, str]) -> types.ModuleType:
        src = subprocess.run(["git", "show", f"{rev}:stride/optim/{module}.py"], cwd=root, capture_output=True,
                             text=True, check=True).stdout
        for a, b in replace.items():
            src = src.replace(a, b)
        name = f"{module}_at_{rev}"
        path = folder / f"{name}.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses look their module up there
        assert spec.loader is not None
        spec.loader.exec_module(mod)
        return mod

    # the revision's own state helpers too: its AdamW8bit subclasses them, and today's base class asks its
    # subclasses for checks an older one does not define
    load("state", {})
    mod = load("adamw8bit", {"from stride.optim.state import": f"from state_at_{rev} import"})
    return lambda ps, lr: mod.AdamW8bit(ps, lr=lr, **HP)


def param_shapes(quick: bool, kind: str = "8m") -> list[tuple[int, ...]]:
    """"8m": 8 x [1024, 1024] + 16 x [1024]; "reference": the default config's model (98k parameters in
    19 tensors: per-step overhead matters there, not bandwidth)."""
    if quick:
        return [(128, 256)] * 4 + [(256,)] * 4
    if kind == "reference":
        from stride.config import load_config
        from stride.data.build import build_data
        from stride.models.registry import build_model

        cfg = load_config()
        bundle = build_data(cfg.data, cfg.train.batch_size)
        model = build_model(cfg.model, bundle.n_features, bundle.seq_len, bundle.n_horizons)
        return [tuple(p.shape) for p in model.parameters()]
    return [(1024, 1024)] * 8 + [(1024,)] * 16


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_steps(makers: dict[str, Maker], shapes, device: str, reps: int, warmup: int) -> dict[str, float | str]:
    """Median step ms per optimizer, alternating optimizers every rep (fixed random grads)."""
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(s, generator=gen).to(device) for s in shapes]
    opts: dict[str, torch.optim.Optimizer] = {}
    out: dict[str, float | str] = {}
    for name, make in makers.items():
        params = [torch.zeros(s, device=device, requires_grad=True) for s in shapes]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        try:
            opts[name] = make(params, 1e-3)
            for _ in range(warmup):  # torchao compiles its step on the first call
                opts[name].step()
        except Exception as exc:  # noqa: BLE001 - one optimizer failing must not end the run
            out[name] = f"{type(exc).__name__}: {str(exc)[:80]}"
            opts.pop(name, None)
    times: dict[str, list[float]] = {n: [] for n in opts}
    for _ in range(reps):
        for name, opt in opts.items():
            _sync(device)
            t0 = time.perf_counter()
            opt.step()
            _sync(device)
            times[name].append((time.perf_counter() - t0) * 1e3)
    for name, opt in opts.items():
        out[name] = statistics.median(times[name])
        n = sum(p.numel() for g in opt.param_groups for p in g["params"])
        out[name + ":bytes"] = optimizer_state_bytes(opt) / n
    return out


def gradient_sequence(shapes, steps: int, kind: str) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    """p_0 and `steps` gradients per tensor. "plain": a persistent direction plus noise of the same
    size, one scale per tensor (10^-2..10^1); "heavy": the same with a log-normal scale per element
    (sigma 1.5: a 256-block spans ~6 decades of v) and 30% of matrix rows without gradient each step."""
    gen = torch.Generator().manual_seed(1 if kind == "plain" else 2)
    p0 = [torch.randn(s, generator=gen).mul_(0.02) for s in shapes]
    scales: list[float | torch.Tensor]
    if kind == "plain":
        base = [torch.randn(s, generator=gen) for s in shapes]
        scales = [10.0 ** (torch.rand((), generator=gen).item() * 3 - 2) for _ in shapes]
    else:
        scales = [torch.exp(1.5 * torch.randn(s, generator=gen)) * 10.0 ** (torch.rand((), generator=gen).item() * 3
                                                                            - 2) for s in shapes]
        base = [torch.randn(s, generator=gen) for s in shapes]
    seq = []
    for _ in range(steps):
        gs = []
        for b, sc in zip(base, scales, strict=True):
            g = (b + torch.randn(b.shape, generator=gen)).mul_(sc)
            if kind == "heavy" and g.dim() == 2:
                g.mul_((torch.rand(g.shape[0], 1, generator=gen) > 0.3).float())
            gs.append(g)
        seq.append(gs)
    return p0, seq


def drift(makers: dict[str, Maker], shapes, device: str, steps: int, kind: str = "plain",
          betas: tuple[float, float] = (0.9, 0.95)) -> dict[str, float | str]:
    """||p - p_adamw|| / ||p_adamw - p_0|| after `steps` steps on the same gradients."""
    p0, seq = gradient_sequence(shapes, steps, kind)
    hp = {**HP, "betas": betas}

    def run(make: Maker) -> list[torch.Tensor]:
        params = [p.clone().to(device).requires_grad_() for p in p0]
        opt = make(params, 1e-3)
        for group in opt.param_groups:
            group["betas"] = betas  # the makers use HP's betas; every optimizer here reads them per step
        for gs in seq:
            for p, g in zip(params, gs, strict=True):
                p.grad = g.to(device)
            opt.step()
        return [p.detach().double().cpu() for p in params]

    ref = run(lambda ps, lr: torch.optim.AdamW(ps, lr=lr, foreach=False, **hp))
    moved = math.sqrt(sum((r - p.double()).square().sum().item() for r, p in zip(ref, p0, strict=True)))
    out: dict[str, float | str] = {}
    for name, make in makers.items():
        try:
            got = run(make)
        except Exception as exc:  # noqa: BLE001
            out[name] = f"{type(exc).__name__}: {str(exc)[:80]}"
            continue
        out[name] = math.sqrt(sum((a - r).square().sum().item() for a, r in zip(got, ref, strict=True))) / moved
    return out


def reference_workload(makers: dict[str, Maker], steps: int, lr: float) -> dict[str, dict | str]:
    """Final val loss and trainer timings on the default config, one optimizer after the other."""
    from stride.config import load_config
    from stride.train import trainer as trainer_module
    from stride.train.trainer import Trainer

    out: dict[str, dict | str] = {}
    for name, make in makers.items():
        # benchmark-only: the trainer builds this optimizer instead of the one `optim.name` names
        trainer_module.build_optimizer = lambda params, cfg, tensor_lr=False, make=make: make(list(params), cfg.lr)
        cfg = load_config(overrides=[
            f"optim.lr={lr}", f"train.steps={steps}", "train.threads=1",
            "metrics.progress=false", "metrics.flops=false", f"train.val_every={steps}", "train.val_batches=16",
        ])
        try:
            s = Trainer(config=cfg, write_run_dir=False).fit().summary
        except Exception as exc:  # noqa: BLE001
            out[name] = f"{type(exc).__name__}: {str(exc)[:80]}"
            continue
        finally:
            trainer_module.build_optimizer = factory.build_optimizer
        out[name] = {"val_loss": s["final_val_loss"], "opt_ms": 1e3 * s["step_time_breakdown_s"].get("optimizer", 0.0),
                     "step_ms": 1e3 * s["step_time_s"]}
    return out


def format_table(rows: list[Row], header: str) -> str:
    head = (f"{'optimizer':<26} {'step ms':>9} {'x fused':>8} {'B/param':>8} {'drift':>9} {'drift_b2':>9} "
            f"{'drift_hvy':>9} {'val loss':>9} {'vs adamw':>9} {'train opt ms':>12} {'train step ms':>13}  note")
    lines = [header, head, "-" * len(head)]
    for r in rows:
        def f(v, fmt):
            return format(v, fmt) if v is not None else "-"
        lines.append(
            f"{r.name:<26} {f(r.step_ms, '9.2f'):>9} {f(r.ratio_vs_fused, '8.2f'):>8} "
            f"{f(r.state_bytes_per_param, '8.3f'):>8} {f(r.drift, '9.2e'):>9} {f(r.drift_b2, '9.2e'):>9} "
            f"{f(r.drift_heavy, '9.2e'):>9} {f(r.val_loss, '9.5f'):>9} "
            f"{f(r.val_vs_adamw and 100 * r.val_vs_adamw, '+8.2f'):>8}% {f(r.train_opt_ms, '12.2f'):>12} "
            f"{f(r.train_step_ms, '13.2f'):>13}  {r.note}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object with every figure as the last line")
    ap.add_argument("--quick", action="store_true", help="small sizes, few steps: checks the script, measures nothing")
    ap.add_argument("--device", default="auto", help="auto (cuda if available), cpu or cuda")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--shapes", choices=("8m", "reference"), default="8m",
                    help="parameters for the step timing: 8.4M in 24 tensors, or the reference model's")
    ap.add_argument("--threads", type=int, default=0, help="torch threads for the step timing (0: torch's default)")
    ap.add_argument("--drift-steps", type=int, default=60)
    ap.add_argument("--train-steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=1e-3, help="lr on the reference workload")
    ap.add_argument("--only", default="", help="comma-separated optimizer names (default: all)")
    ap.add_argument("--no-train", action="store_true", help="skip the reference-workload runs")
    ap.add_argument("--no-drift", action="store_true", help="skip the drift runs")
    ap.add_argument("--baseline", default="", metavar="REV",
                    help="add stride's AdamW8bit as of this git revision (e.g. f841289, state format 1)")
    args = ap.parse_args(argv)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    makers, skipped = candidates()
    if args.only:
        wanted = set(args.only.split(","))
        makers = {k: v for k, v in makers.items() if k in wanted}
        skipped = {k: v for k, v in skipped.items() if k in wanted}
    if args.baseline:
        makers = {**{k: v for k, v in makers.items() if k != "torchao_adamw8bit"},
                  f"stride_adamw8bit@{args.baseline}": baseline_maker(args.baseline),
                  **{k: v for k, v in makers.items() if k == "torchao_adamw8bit"}}  # torchao compiles: last
    shapes = param_shapes(args.quick, args.shapes)
    if args.threads:
        torch.set_num_threads(args.threads)
    n_params = sum(torch.Size(s).numel() for s in shapes)
    t0 = time.time()
    threads = torch.get_num_threads()  # the trainer runs below set 1 thread for themselves
    timing = time_steps(makers, shapes, device, 3 if args.quick else args.reps, 2)
    drift_shapes = [(64, 128), (128,), (96, 64)] if args.quick else [(512, 512), (512,), (256, 1024)]
    n_drift, n_b2, n_heavy = (5, 5, 5) if args.quick else (args.drift_steps, 200, 100)
    drifts = drifts_b2 = drifts_heavy = {}
    if not args.no_drift:
        drifts = drift(makers, drift_shapes, device, n_drift)
        drifts_b2 = drift(makers, drift_shapes, device, n_b2, betas=(0.9, 0.999))
        drifts_heavy = drift(makers, drift_shapes, device, n_heavy, kind="heavy")
    train = {} if args.no_train else reference_workload(makers, 10 if args.quick else args.train_steps, args.lr)
    rows: list[Row] = []
    for name in makers:
        r = Row(name)
        notes = []
        t = timing.get(name)
        if isinstance(t, float):
            r.step_ms, r.state_bytes_per_param = t, float(timing[name + ":bytes"])
        elif t is not None:
            notes.append(f"step: {t}")
        for field, results in (("drift", drifts), ("drift_b2", drifts_b2), ("drift_heavy", drifts_heavy)):
            d = results.get(name)
            if isinstance(d, float):
                setattr(r, field, d)
            elif d is not None:
                notes.append(f"{field}: {d}")
        w = train.get(name)
        if isinstance(w, dict):
            r.val_loss, r.train_opt_ms, r.train_step_ms = w["val_loss"], w["opt_ms"], w["step_ms"]
        elif w is not None:
            notes.append(f"train: {w}")
        r.note = "; ".join(notes)
        rows.append(r)
    by = {r.name: r for r in rows}
    fused = by.get("torch_adamw_fused")
    for r in rows:
        if fused and fused.step_ms and r.step_ms:
            r.ratio_vs_fused = r.step_ms / fused.step_ms
        if fused and fused.val_loss and r.val_loss is not None:
            r.val_vs_adamw = r.val_loss / fused.val_loss - 1.0
    rows += [Row(name, note=f"skipped: {why}") for name, why in skipped.items()]
    load = os.getloadavg()
    header = (f"device {device}, torch {torch.__version__}, step timing with {threads} threads on "
              f"{n_params / 1e6:.2f}M params, drift after {n_drift} steps "
              f"(drift_b2: {n_b2}, beta2 0.999; drift_hvy: {n_heavy}, heavy-tailed), "
              f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {time.time() - t0:.0f} s"
              + (" (quick: not a measurement)" if args.quick else ""))
    print(format_table(rows, header))
    if args.json:
        print(json.dumps({"device": device, "torch": torch.__version__, "n_params": n_params, "quick": args.quick,
                          "threads": threads, "load_avg": load, "rows": [asdict(r) for r in rows]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
