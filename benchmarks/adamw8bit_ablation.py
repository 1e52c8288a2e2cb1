"""Where AdamW8bit's drift from fp32 AdamW comes from: each quantisation choice swapped on its own.

A simulator runs AdamW with the moments passed through a code after every step (block-wise, one
absmax per block, as the real optimizer stores them) on the gradient sequences of
`benchmarks/optimizers.py` (same shapes, same seeds), and reports the drift
||p - p_adamw|| / ||p_adamw - p_0|| for:

- format 1 (stride before state format 2: e4m3 codes of m and of sqrt(v)), then with m or v kept in
  fp32 (which moment causes the drift), with 32-value blocks, with stochastic rounding, and storing v
  instead of sqrt(v);
- other codes for m alone (int8 linear, a power-2 "dynamic" map, e3m4) and for sqrt(v) alone (uint8
  linear, the per-block log grid of format 2), and m stored as the normalised update;
- format 2 (what `stride.optim.adamw8bit` stores now), simulated and the real optimizer.

Tensors under 4096 values keep fp32 moments, as in the optimizer. The simulator is slow (table codes
with searchsorted); it measures numerics only.

    .venv/bin/python benchmarks/adamw8bit_ablation.py [--json] [--quick] [--sequences plain,b2,heavy]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from optimizers import gradient_sequence  # noqa: E402

from stride.optim.adamw8bit import AdamW8bit  # noqa: E402
from stride.optim.adamw8bit_codes import decode_sqrt_v, encode_sqrt_v  # noqa: E402

Codec = Callable[[torch.Tensor, torch.Generator], torch.Tensor]  # [B, block] -> the values it decodes to
SEQUENCES = {"plain": ("plain", (0.9, 0.95), 60), "b2": ("plain", (0.9, 0.999), 200),
             "heavy": ("heavy", (0.9, 0.95), 100)}
SHAPES = [(512, 512), (512,), (256, 1024)]


def fp32(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return x


def table_codec(table: torch.Tensor, block: int = 256, stochastic: bool = False) -> Codec:
    """Values on table * absmax of their block (table sorted, in [-1, 1] or [0, 1], holding 0), nearest
    (or stochastic: the upper neighbour with probability proportional to the distance)."""
    table = table.float().unique().sort().values
    mid = (table[1:] + table[:-1]) / 2

    def code(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        xb = x.reshape(-1, block)
        amax = xb.abs().amax(1, keepdim=True).clamp_min(1e-30)
        u = (xb / amax).contiguous()
        if stochastic:
            hi = torch.searchsorted(table, u).clamp(1, len(table) - 1)
            lo_v, hi_v = table[hi - 1], table[hi]
            up = torch.rand(u.shape, generator=gen) < ((u - lo_v) / (hi_v - lo_v)).clamp(0, 1)
            idx = torch.where(up, hi, hi - 1)
        else:
            idx = torch.bucketize(u, mid)
        return (table[idx] * amax).reshape(x.shape)

    return code


def e4m3_table(signed: bool) -> torch.Tensor:
    g = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    g = g[~g.isnan()] / 448.0
    return g if signed else g[g >= 0]


def float_table(exp_bits: int, man_bits: int, signed: bool) -> torch.Tensor:
    """All values of a small float format with subnormals and no inf/nan, largest = 1."""
    vals = [(m / 2**man_bits) * 2.0 if e == 0 else (1 + m / 2**man_bits) * 2.0**e
            for e in range(2**exp_bits) for m in range(2**man_bits)]
    mag = torch.tensor(vals) / max(vals)
    return torch.cat([-mag, mag]) if signed else mag


def power_table(p: float, signed: bool) -> torch.Tensor:
    """A 'dynamic' map of my own: (k / n)^p, dense near zero, 127 (signed) or 255 magnitudes."""
    mag = (torch.arange(0, 128 if signed else 256) / (127.0 if signed else 255.0)) ** p
    return torch.cat([-mag, mag]) if signed else mag


def linear_table(signed: bool) -> torch.Tensor:
    return power_table(1.0, signed)


def log_grid(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Format 2's sqrt(v) code (the real encoder and decoder)."""
    xb = x.reshape(-1, 256).contiguous()
    codes = torch.empty(xb.shape, dtype=torch.uint8)
    bounds = torch.empty(xb.shape[0], 2, dtype=torch.bfloat16)
    encode_sqrt_v(xb, codes, bounds)
    return decode_sqrt_v(codes, bounds).reshape(x.shape).clone()


class SimAdamW:
    """AdamW whose moments pass through `m_code` / `r_code` after each step (r = sqrt(v), or v itself
    with `store="v"`); with `m_normed`, m is stored as u = m / (sqrt(v_hat) + eps) and rebuilt from the
    stored r, as format 2 does."""

    def __init__(self, params, lr: float, betas, m_code: Codec, r_code: Codec, store: str = "sqrt",
                 m_normed: bool = False, eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        self.ps, self.lr, (self.b1, self.b2), self.eps, self.wd = params, lr, betas, eps, weight_decay
        self.m_code, self.r_code, self.store, self.m_normed = m_code, r_code, store, m_normed
        self.m: list[torch.Tensor | None] = [None] * len(params)
        self.r: list[torch.Tensor | None] = [None] * len(params)
        self.t = 0
        self.gen = torch.Generator().manual_seed(0)

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        t, b1, b2, eps = self.t, self.b1, self.b2, self.eps
        bc1, bc2s = 1 - b1**t, math.sqrt(1 - b2**t)
        for i, p in enumerate(self.ps):
            g = p.grad.float().reshape(-1)
            n = g.numel()
            quantised = n >= 4096
            size = -(-n // 256) * 256 if quantised else n
            if self.m[i] is None:
                self.m[i], self.r[i] = torch.zeros(size), torch.zeros(size)
            g = torch.nn.functional.pad(g, (0, size - n))
            r_old = self.r[i]
            v = r_old.square() if (self.store == "sqrt" or not quantised) else r_old.clone()
            if quantised and self.m_normed:
                m = self.m[i] * (r_old / math.sqrt(1 - b2 ** (t - 1)) + eps) if t > 1 else torch.zeros(size)
            else:
                m = self.m[i].clone()
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            r = v.sqrt()
            den = r / bc2s + eps
            update = (m / bc1) / den
            if quantised:
                self.r[i] = self.r_code(r if self.store == "sqrt" else v, self.gen)
                self.m[i] = self.m_code(m / den if self.m_normed else m, self.gen)
            else:
                self.m[i], self.r[i] = m, r
            p.mul_(1 - self.lr * self.wd).add_(update[:n].view_as(p), alpha=-self.lr)


def variants() -> dict[str, dict]:
    e4s, e4u = table_codec(e4m3_table(True)), table_codec(e4m3_table(False))
    return {
        "format 1: e4m3 m, e4m3 sqrt(v)": {"m_code": e4s, "r_code": e4u},
        "  m fp32, sqrt(v) e4m3": {"m_code": fp32, "r_code": e4u},
        "  m e4m3, sqrt(v) fp32": {"m_code": e4s, "r_code": fp32},
        "  32-value blocks": {"m_code": table_codec(e4m3_table(True), 32),
                              "r_code": table_codec(e4m3_table(False), 32)},
        "  stochastic rounding": {"m_code": table_codec(e4m3_table(True), stochastic=True),
                                  "r_code": table_codec(e4m3_table(False), stochastic=True)},
        "  v stored, not sqrt(v)": {"m_code": e4s, "r_code": e4u, "store": "v"},
        "m int8 linear (v fp32)": {"m_code": table_codec(linear_table(True)), "r_code": fp32},
        "m power-2 map (v fp32)": {"m_code": table_codec(power_table(2, True)), "r_code": fp32},
        "m e3m4 (v fp32)": {"m_code": table_codec(float_table(3, 4, True)), "r_code": fp32},
        "m as int8 normalised update (v fp32)": {"m_code": table_codec(linear_table(True)), "r_code": fp32,
                                                 "m_normed": True},
        "sqrt(v) uint8 linear (m fp32)": {"m_code": fp32, "r_code": table_codec(linear_table(False))},
        "sqrt(v) log grid (m fp32)": {"m_code": fp32, "r_code": log_grid},
        "format 2 (simulated)": {"m_code": table_codec(linear_table(True)), "r_code": log_grid, "m_normed": True},
    }


def drifts(shapes, seq_name: str, steps: int | None = None) -> dict[str, float]:
    """Every variant's drift on one gradient sequence."""
    kind, betas, n_steps = SEQUENCES[seq_name]
    p0, grads = gradient_sequence(shapes, steps or n_steps, kind)

    def run(make: Callable[[list[torch.Tensor]], object]) -> list[torch.Tensor]:
        params = [p.clone().requires_grad_() for p in p0]
        opt = make(params)
        for gs in grads:
            for p, g in zip(params, gs, strict=True):
                p.grad = g
            opt.step()  # type: ignore[attr-defined]
        return [p.detach().double() for p in params]

    ref = run(lambda ps: torch.optim.AdamW(ps, lr=1e-3, betas=betas, eps=1e-8, weight_decay=0.01, foreach=False))
    moved = math.sqrt(sum((r - p.double()).square().sum().item() for r, p in zip(ref, p0, strict=True)))
    makers: dict[str, Callable[[list[torch.Tensor]], object]] = {
        name: functools.partial(SimAdamW, lr=1e-3, betas=betas, **kw) for name, kw in variants().items()}
    makers["format 2 (stride.optim.adamw8bit)"] = lambda ps: AdamW8bit(ps, lr=1e-3, betas=betas, eps=1e-8,
                                                                       weight_decay=0.01)
    out = {}
    for name, make in makers.items():
        got = run(make)
        out[name] = math.sqrt(sum((a - r).square().sum().item() for a, r in zip(got, ref, strict=True))) / moved
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object with every figure as the last line")
    ap.add_argument("--quick", action="store_true", help="tiny shapes and 4 steps: checks the script only")
    ap.add_argument("--sequences", default="plain,b2,heavy", help=f"comma-separated, of {', '.join(SEQUENCES)}")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    seqs = [s for s in args.sequences.split(",") if s]
    bad = [s for s in seqs if s not in SEQUENCES]
    if bad:
        ap.error(f"--sequences: unknown {bad}; choose from {', '.join(SEQUENCES)}")
    shapes = [(64, 128), (128,), (96, 64)] if args.quick else SHAPES
    t0 = time.time()
    table: dict[str, dict[str, float]] = {}
    for seq_name in seqs:
        for name, d in drifts(shapes, seq_name, 4 if args.quick else None).items():
            table.setdefault(name, {})[seq_name] = d
    load = os.getloadavg()
    print("drift from fp32 AdamW (||p - p_adamw|| / ||p_adamw - p_0||); sequences: "
          + "; ".join(f"{s}: {SEQUENCES[s][0]} gradients, betas {SEQUENCES[s][1]}, {SEQUENCES[s][2]} steps"
                      for s in seqs)
          + f"; {time.time() - t0:.0f} s, load {load[0]:.1f}" + (" (quick: not a measurement)" if args.quick else ""))
    print(f"{'variant':<40}" + "".join(f"{s:>10}" for s in seqs))
    for name, row in table.items():
        print(f"{name:<40}" + "".join(f"{100 * row[s]:>9.3g}%" for s in seqs))
    if args.json:
        print(json.dumps({"quick": args.quick, "load_avg": load, "drift": table}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
