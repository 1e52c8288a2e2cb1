"""GPU benchmark of stride's fused kernels and optimizers against eager PyTorch, torch.compile and Liger.

One command on one GPU (about 3-6 minutes on an H200, mostly torch.compile warm-up):

    .venv/bin/python benchmarks/kernels.py [--json] [--results benchmarks/RESULTS.md]

Each op runs forward + backward (optimizers: one step) at several sizes; times are medians of CUDA
event intervals after warm-up, around replays of the step captured as a CUDA graph (what the device takes;
`launchms` is the same step launched from Python, which is what small fused kernels mostly cost there).
The inputs are restored before each implementation (one of Liger's writes into them).
Memory-bound ops report achieved GB/s from a byte model (bytes each
implementation must at least move) and its fraction of the measured device-to-device copy bandwidth;
the chunked linear + cross-entropy is compute-bound and reports TFLOP/s and peak memory instead.
Without a CUDA GPU it prints a message and exits 0 (`--cpu-smoke` runs every code path on tiny CPU
shapes with a wall-clock timer, to check the script itself, not to measure anything; with
TRITON_INTERPRET=1 that includes the Triton kernels).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

# This file's folder comes first on sys.path when it runs as a script, where `import kernels` (which
# bitsandbytes tries, for the PyPI package of that name) would find this file: drop it, add the repo.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stride.kernels import reference  # noqa: E402
from stride.kernels.linear_ce import linear_cross_entropy, torch_chunk_cross_entropy  # noqa: E402
from stride.kernels.runtime import interpreter_enabled  # noqa: E402


@dataclass
class Row:
    op: str
    size: str
    impl: str
    ms: float | None
    gbps: float | None = None
    copy_frac: float | None = None
    tflops: float | None = None
    peak_mib: float | None = None
    max_rel_err: float | None = None
    note: str = ""
    launch_ms: float | None = None  # the same step launched from Python each time (on a GPU; `ms` is its graph)


@dataclass
class Case:
    """One op at one size: inputs, what to differentiate, and how much work it is."""

    op: str
    size: str
    args: tuple
    diff: list[torch.Tensor]
    bytes_moved: float = 0.0
    flops: float = 0.0
    impls: dict[str, Callable] = field(default_factory=dict)


class Timer:
    """Median time of fn in ms: CUDA events on a GPU, perf_counter for the CPU smoke run."""

    def __init__(self, cuda: bool, reps: int, warmup: int) -> None:
        self.cuda, self.reps, self.warmup = cuda, reps, warmup

    def __call__(self, fn: Callable[[], object]) -> float:
        for _ in range(self.warmup):
            fn()
        if not self.cuda:
            ts = []
            for _ in range(self.reps):
                t0 = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t0) * 1e3)
            return statistics.median(ts)
        torch.cuda.synchronize()
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(self.reps)
        ]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in events)


def copy_bandwidth_gbps(timer: Timer, device: str, mib: int) -> float:
    """Measured device-to-device copy: (read + write) bytes / median time."""
    src = torch.empty(mib * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = timer(lambda: dst.copy_(src))
    return 2 * src.numel() / (ms * 1e-3) / 1e9


def liger_functions() -> dict[str, Callable]:
    """Liger-Kernel ops with the same semantics as ours, where Liger is importable."""
    try:
        import liger_kernel.transformers.functional as lf
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return {}
    out: dict[str, Callable] = {}
    if hasattr(lf, "liger_rms_norm"):
        out["rms_norm"] = lambda x, w, eps: lf.liger_rms_norm(x, w, eps)
    if hasattr(lf, "liger_layer_norm"):
        out["layer_norm"] = lambda x, w, b, eps: lf.liger_layer_norm(x, w, b, eps)
    if hasattr(lf, "liger_swiglu"):
        out["swiglu"] = lf.liger_swiglu
    if hasattr(lf, "liger_fused_linear_cross_entropy"):
        out["linear_ce"] = lambda x, w, b, t: lf.liger_fused_linear_cross_entropy(x, w, t, b)
    return out  # Liger's RoPE rotates halves, not interleaved pairs: not the same op, not compared


def eager_linear_ce(x, w, b, t):
    return F.cross_entropy(F.linear(x, w, b).float(), t)


def triton_rope_strided(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """stride's RoPE through its strided pair kernel (the one before the row kernel), timed beside it."""
    from stride.kernels import triton_rope

    return triton_rope.rope(x, cos, sin, rows=False)


def triton_impls() -> dict[str, Callable]:
    from stride.kernels import triton_norms, triton_rope, triton_swiglu, triton_ts_loss
    from stride.kernels.triton_cross_entropy import chunk_cross_entropy

    return {
        "rms_norm": triton_norms.rms_norm,
        "layer_norm": triton_norms.layer_norm,
        "swiglu": triton_swiglu.swiglu,
        "rope": triton_rope.rope,
        "ts_loss": triton_ts_loss.ts_loss,
        "linear_ce": lambda x, w, b, t: linear_cross_entropy(x, w, b, t, chunk_ce=chunk_cross_entropy),
    }


def build_cases(device: str, dtype: torch.dtype, smoke: bool, with_triton: bool, with_compile: bool) -> list[Case]:
    es = torch.tensor([], dtype=dtype).element_size()
    tri = triton_impls() if with_triton else {}
    lig = liger_functions()
    comp: dict[str, Callable] = {}
    if with_compile:
        for name, fn in [("rms_norm", reference.rms_norm), ("layer_norm", reference.layer_norm),
                         ("swiglu", reference.swiglu), ("rope", reference.rope), ("ts_loss", reference.ts_loss)]:
            comp[name] = torch.compile(fn, dynamic=None)  # static first shape, one dynamic recompile
    eager = {"rms_norm": reference.rms_norm, "layer_norm": reference.layer_norm, "swiglu": reference.swiglu,
             "rope": reference.rope, "ts_loss": reference.ts_loss, "linear_ce": eager_linear_ce}
    chunked_torch = lambda x, w, b, t: linear_cross_entropy(x, w, b, t, chunk_ce=torch_chunk_cross_entropy)  # noqa: E731

    def impls(op: str) -> dict[str, Callable]:
        d = {"eager": eager[op]}
        if op in comp:
            d["compile"] = comp[op]
        if op == "linear_ce":
            d["chunked-torch"] = chunked_torch
        if op in lig:
            d["liger"] = lig[op]
        if op in tri:
            d["stride-triton"] = tri[op]
        if op == "rope" and tri:
            d["stride-strided"] = triton_rope_strided
        return d

    def rnd(*shape, grad=True, dt=dtype):
        return torch.randn(shape, device=device, dtype=dt).requires_grad_(grad)

    cases: list[Case] = []
    norm_sizes = [(64, 96)] if smoke else [(16384, 1024), (8192, 4096), (4096, 16384)]
    for n, d in norm_sizes:
        w, b = rnd(d), rnd(d)
        x = rnd(n, d)
        cases.append(Case("rms_norm", f"{n}x{d}", (x, w, 1e-6), [x, w], 5 * n * d * es, impls=impls("rms_norm")))
        cases.append(Case("layer_norm", f"{n}x{d}", (x, w, b, 1e-5), [x, w, b], 5 * n * d * es,
                          impls=impls("layer_norm")))
    for n, d in [(64, 100)] if smoke else [(8192, 4096), (8192, 14336)]:
        a, u = rnd(n, d), rnd(n, d)
        cases.append(Case("swiglu", f"{n}x{d}", (a, u), [a, u], 8 * n * d * es, impls=impls("swiglu")))
    for bsz, h, t, hd in [(1, 2, 8, 16)] if smoke else [(8, 32, 2048, 128), (4, 16, 4096, 64)]:
        cos = torch.randn(t, hd // 2, device=device)
        sin = torch.randn(t, hd // 2, device=device)
        x = rnd(bsz, h, t, hd)
        cases.append(Case("rope", f"{bsz}x{h}x{t}x{hd}", (x, cos, sin), [x], 4 * x.numel() * es, impls=impls("rope")))
    for n, hz, q in [(64, 3, 3)] if smoke else [(1 << 20, 16, 1), (1 << 20, 16, 3)]:
        kind = "quantile" if q > 1 else "mse"
        p = rnd(n, hz, q) if q > 1 else rnd(n, hz)
        y = rnd(n, hz, grad=False)
        kw = {"quantiles": [0.1, 0.5, 0.9]} if q > 1 else {}
        fns = {k: _bind_loss(f, kind, kw) for k, f in impls("ts_loss").items()}
        # the op's own traffic: pred in, target in, grad out. An implementation's extra passes are its cost,
        # not bytes it is credited for: counting stride's fp32 gradient round trip (8 B an element) made
        # compile, which has none, read 122 % of the device copy on an H200 (RESULTS.md, 2026-12-04)
        moved = p.numel() * 2 * es + y.numel() * es
        cases.append(Case("ts_loss", f"{n}x{hz}x{q}", (p, y), [p], moved, impls=fns))
    for n, d, v in [(32, 16, 100)] if smoke else [(8192, 2048, 32000), (4096, 4096, 128256)]:
        x = rnd(n, d) * 0.1
        w = (rnd(v, d, grad=False) * d**-0.5).requires_grad_()
        t = torch.randint(0, v, (n,), device=device)
        cases.append(Case("linear_ce", f"{n}x{d}x{v}", (x, w, None, t), [x, w], flops=6.0 * n * d * v,
                          impls=impls("linear_ce")))
    return cases


def _bind_loss(fn: Callable, kind: str, kw: dict) -> Callable:
    return lambda p, y: fn(p, y, kind, **kw)


def graph_ms(step: Callable[[], object], timer: Timer) -> float:
    """`step` captured once into a CUDA graph, its replays timed: what the device takes, without the host's
    launches. The first GPU run (H200, 2026-12-04) timed each fused kernel's forward and backward as launched
    from Python at 0.5-0.7 ms at every size, where eager's time grew with the size: the launches, not the
    kernels, were timed. Warm-up on a side stream first, as torch's graph capture asks."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    try:
        return timer(graph.replay)
    finally:
        del graph
        torch.cuda.empty_cache()


def run_case(case: Case, timer: Timer, cuda: bool) -> list[Row]:
    """Every implementation of one case on the same inputs. The inputs are restored before each one and
    checked after it: Liger's SwiGLU backward writes its gradients into its inputs (seen on an H200, where
    every implementation after it was compared on those gradients and read a relative error of 1.0)."""
    rows: list[Row] = []
    ref_out = None
    inputs = [a for a in case.args if isinstance(a, torch.Tensor)]
    pristine = [a.detach().clone() for a in inputs]
    for name, fn in case.impls.items():
        with torch.no_grad():
            for a, p in zip(inputs, pristine, strict=True):
                a.copy_(p)
        def step(fn=fn):
            out = fn(*case.args)
            grad = torch.ones_like(out) if out.dim() == 0 else torch.randn_like(out)
            return out, torch.autograd.grad(out, case.diff, grad)

        try:
            out = fn(*case.args).detach().float()
            if ref_out is None:
                ref_out = out
            err = ((out - ref_out).norm() / ref_out.norm().clamp_min(1e-30)).item()
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            ms = timer(step)
            peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
        except Exception as exc:  # noqa: BLE001 - one failing implementation must not end the run
            rows.append(Row(case.op, case.size, name, None, note=f"{type(exc).__name__}: {str(exc)[:60]}"))
            continue
        launch_ms, note = None, ""
        if cuda:
            try:
                ms, launch_ms = graph_ms(step, timer), ms
            except Exception as exc:  # noqa: BLE001 - an op that syncs cannot be captured: keep the launch time
                first = (str(exc).strip().splitlines() or [""])[0][:90]
                note = f"launch-timed (graph capture failed: {type(exc).__name__}: {first})"
        row = Row(case.op, case.size, name, ms, max_rel_err=err, peak_mib=peak, launch_ms=launch_ms, note=note)
        if any(not torch.equal(a, p) for a, p in zip(inputs, pristine, strict=True)):
            row.note = "; ".join(filter(None, [row.note, "writes into its inputs (restored for the next one)"]))
        if case.bytes_moved:
            row.gbps = case.bytes_moved / (ms * 1e-3) / 1e9
        if case.flops:
            row.tflops = case.flops / (ms * 1e-3) / 1e12
        rows.append(row)
    return rows


def optimizer_makers() -> dict[str, Callable]:
    """One AdamW step per implementation: torch's two, stride's Triton kernels (impl="triton": the
    kernel on CUDA, the interpreter in the CPU smoke run) and torch paths, and the 8-bit AdamWs of
    bitsandbytes and torchao where they import (the `compare` extra)."""
    from stride.optim.adafactor import Adafactor
    from stride.optim.adamw8bit import AdamW8bit
    from stride.optim.adamw_fused_triton import FusedAdamW

    makers: dict[str, Callable] = {
        "torch-foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-3, foreach=True),
        "torch-fused": lambda ps: torch.optim.AdamW(ps, lr=1e-3, fused=True),
        "stride-fused": lambda ps: FusedAdamW(ps, lr=1e-3, impl="triton"),
        "stride-8bit": lambda ps: AdamW8bit(ps, lr=1e-3, impl="triton"),
        "stride-8bit-torch": lambda ps: AdamW8bit(ps, lr=1e-3, impl="torch"),
        "stride-adafactor": lambda ps: Adafactor(ps, lr=1e-3),
    }
    try:
        import bitsandbytes.optim as bnb

        makers["bnb-8bit"] = lambda ps: bnb.AdamW8bit(ps, lr=1e-3)
    except Exception:  # noqa: BLE001 - not installed or no kernels for this device
        pass
    try:
        import torchao.optim as ao

        makers["torchao-8bit"] = lambda ps: ao.AdamW8bit(ps, lr=1e-3)  # compiles its step: keep it last
    except Exception:  # noqa: BLE001
        pass
    return makers


def _codes_note(a, b) -> str:
    """How the Triton 8-bit step's state compares with the torch path's after the same steps."""
    differ = total = 0
    for pa, pb in zip(a.param_groups[0]["params"], b.param_groups[0]["params"], strict=True):
        sa, sb = a.state[pa], b.state[pb]
        if "exp_avg_normed_codes" not in sa:
            continue
        for key in ("exp_avg_normed_codes", "exp_avg_sqrt_grid_codes"):
            differ += int((sa[key] != sb[key]).sum())
            total += sa[key].numel()
    return f"vs torch path: 8-bit codes differing {differ / max(total, 1):.2e}"


def optimizer_rows(device: str, timer: Timer, smoke: bool, deadline: float) -> list[Row]:
    """Every optimizer from the same parameters and gradients, the same number of steps (warm-up +
    timed reps), so the final parameters are compared too: relerr against torch's fused AdamW."""
    from stride.optim.state import optimizer_state_bytes

    shapes = [(128, 64)] * 3 + [(300,)] if smoke else [(4096, 4096)] * 8 + [(4096,)] * 64 + [(11008, 4096)] * 3
    n_params = sum(torch.Size(s).numel() for s in shapes)
    size = f"{n_params / 1e6:.0f}M" if n_params >= 1e6 else f"{n_params / 1e3:.0f}k"
    gen = torch.Generator(device=device).manual_seed(0)
    grads = [torch.randn(s, device=device, generator=gen) for s in shapes]
    # fp32 AdamW moves p, g, m, v in and p, m, v out: 28 B/param; 8-bit: p, g in, p out (12 B) plus
    # 2.03 B of state (both moments, codes + scales) read and written
    bytes_per_param = {"stride-adafactor": None, "stride-8bit": 12 + 2 * 2.03125, "stride-8bit-torch": 12 + 2 * 2.03125,
                       "bnb-8bit": 12 + 2 * 2.03125, "torchao-8bit": 12 + 2 * 2.03125}
    rows, kept = [], {}
    for name, make in optimizer_makers().items():
        if time.time() > deadline:
            rows.append(Row("adamw_step", size, name, None, note="skipped: over --budget-s"))
            continue
        params = [torch.zeros(s, device=device, requires_grad=True) for s in shapes]
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        try:
            opt = make(params)
            ms = timer(opt.step)
            state = optimizer_state_bytes(opt)
        except Exception as exc:  # noqa: BLE001
            rows.append(Row("adamw_step", size, name, None, note=f"{type(exc).__name__}: {exc}"[:70]))
            continue
        per_param = bytes_per_param.get(name, 28)
        gbps = per_param * n_params / (ms * 1e-3) / 1e9 if per_param else None
        note = f"state {state / n_params:.2f} B/param"
        err = None
        if "torch-fused" in kept:
            ref = kept["torch-fused"].param_groups[0]["params"]
            err = max(((p.detach().double() - r.detach().double()).norm() / r.detach().double().norm()).item()
                      for p, r in zip(params, ref, strict=True))
        if name in ("torch-fused", "stride-8bit-torch", "stride-8bit"):
            kept[name] = opt
        if name == "stride-8bit-torch" and "stride-8bit" in kept:
            note += "; " + _codes_note(kept["stride-8bit"], opt)
        rows.append(Row("adamw_step", size, name, ms, gbps=gbps, max_rel_err=err, note=note))
        if name not in kept:
            del opt, params
    return rows


def format_table(rows: list[Row], copy_gbps: float) -> str:
    head = (
        f"{'op':<11} {'size':<18} {'impl':<16} {'ms':>9} {'GB/s':>8} {'%copy':>6} {'TFLOP/s':>8} "
        f"{'peakMiB':>8} {'relerr':>8} {'launchms':>9}  note"
    )
    lines = [f"device-to-device copy bandwidth: {copy_gbps:.0f} GB/s", head, "-" * len(head)]
    for r in rows:
        def f(v, fmt):
            return format(v, fmt) if v is not None else "-"
        lines.append(
            f"{r.op:<11} {r.size:<18} {r.impl:<16} {f(r.ms, '9.3f'):>9} {f(r.gbps, '8.0f'):>8} "
            f"{f(r.copy_frac and 100 * r.copy_frac, '5.0f'):>6} {f(r.tflops, '8.1f'):>8} {f(r.peak_mib, '8.0f'):>8} "
            f"{f(r.max_rel_err, '8.1e'):>8} {f(r.launch_ms, '9.3f'):>9}  {r.note}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object with all figures as the last line")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--only", default="", help="comma-separated ops to run (default: all)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new cases after this long")
    ap.add_argument("--results", default="", help="append the table, dated, with the card name, to this file")
    ap.add_argument("--cpu-smoke", action="store_true", help="run every code path on tiny CPU shapes (no figures)")
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.cpu_smoke:
        msg = "benchmarks/kernels.py: no CUDA GPU here; nothing to measure (the kernels need a GPU to be timed)"
        print(msg)
        if args.json:
            print(json.dumps({"skipped": True, "reason": "no CUDA GPU"}))
        return 0
    device = "cuda" if cuda else "cpu"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    smoke = not cuda
    timer = Timer(cuda, 2 if smoke else args.reps, 1 if smoke else args.warmup)
    t0 = time.time()
    copy_gbps = copy_bandwidth_gbps(timer, device, 8 if smoke else 2048)
    only = {s for s in args.only.split(",") if s}
    with_triton = cuda or interpreter_enabled()
    cases = build_cases(device, dtype, smoke, with_triton, with_compile=not args.no_compile and cuda)
    rows: list[Row] = []
    for case in cases:
        if only and case.op not in only:
            continue
        if time.time() - t0 > args.budget_s:
            rows.append(Row(case.op, case.size, "-", None, note="skipped: over --budget-s"))
            continue
        rows.extend(run_case(case, timer, cuda))
        print(f"[{time.time() - t0:6.1f}s] {case.op} {case.size}", file=sys.stderr)
    if not only or "adamw_step" in only:
        # the optimizers get their own share of the budget: they come after the kernels
        rows.extend(optimizer_rows(device, timer, smoke, t0 + args.budget_s + (0 if smoke else 60)))
    for r in rows:
        if r.gbps is not None:
            r.copy_frac = r.gbps / copy_gbps
    table = format_table(rows, copy_gbps)
    card = torch.cuda.get_device_name() if cuda else "cpu (smoke run, not a measurement)"
    if args.results:
        with open(args.results, "a") as fh:
            fh.write(f"\n## {time.strftime('%Y-%m-%d')} {card} ({args.dtype}, torch {torch.__version__})\n\n"
                     f"```\n{table}\n```\n")
    print(f"{card}, {args.dtype}, {time.time() - t0:.0f} s")
    print(table)
    if args.json:
        print(json.dumps({"device": card, "dtype": args.dtype, "copy_gbps": copy_gbps,
                          "rows": [asdict(r) for r in rows]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
