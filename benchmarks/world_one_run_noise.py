"""How often two identical world-sweep points of one run (`--repeats 1`) read as different: false alarms.

Runs `stride bench --sweep world ... --repeats 1` K times into OUT/r1..rK (one after another, same command), then
judges every pair of sweeps point by point with `stride compare`'s band (stride.report.compare.noise_band and
within_band) under two rules: the old one (a point of one run has no spread: the 2 % floor) and the point's own
timed steps' spread (stride.bench.stats.run_step_rates, step_cv: what a one-run point now carries). The band alone is
counted; `stride compare` itself gives a side flagged contended (`contention_note`) no verdict, and that count is
printed too. Name the CPU and the load beside any figure (docs/bench.md, world sweep).

    .venv/bin/python benchmarks/world_one_run_noise.py OUT [--runs 8] [--world-sizes 1,2] [--steps 120]
    .venv/bin/python benchmarks/world_one_run_noise.py OUT --judge-only   # sweeps already in OUT
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from stride.bench.stats import run_step_rates, step_cv
from stride.report.compare import BAND_FLOOR, noise_band, within_band


def run_sweeps(out: Path, runs: int, world_sizes: str, steps: int) -> None:
    for k in range(1, runs + 1):
        cmd = [sys.executable, "-m", "stride", "bench", "--sweep", "world", "--workloads", "mlp_tiny", "--world-sizes",
               world_sizes, "--strategies", "ddp", "--scaling", "weak", "--repeats", "1", "--set",
               f"train.steps={steps}", "--out", str(out / f"r{k}"), "--no-report"]
        print(f"[{k}/{runs}] load {os.getloadavg()[0]:.1f}: {' '.join(cmd[1:])}", flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def points(out: Path) -> dict[str, list[dict]]:
    """Per point name: each sweep's median throughput, its steps' cv and whether it was flagged contended."""
    found: dict[str, list[dict]] = {}
    for res in sorted(out.glob("r*/results.json")):
        for e in json.loads(res.read_text())["workloads"]:
            run = Path(e["run_dir"])
            s = json.loads((run / "summary.json").read_text())
            rates, _ = run_step_rates(run, s, tomllib.loads((run / "config.toml").read_text()))
            found.setdefault(e["name"], []).append({"x": s["samples_per_s"], "cv": step_cv(rates),
                                                    "contended": e.get("contention_note") is not None})
    return found


def judge(out: Path) -> None:
    for name, xs in points(out).items():
        pairs = list(itertools.combinations(xs, 2))
        old = sum(not within_band(b["x"] / a["x"], BAND_FLOOR) for a, b in pairs)
        new = sum(not within_band(b["x"] / a["x"], noise_band(a, b)) for a, b in pairs)
        quiet = [(a, b) for a, b in pairs if not (a["contended"] or b["contended"])]
        tputs = ", ".join(f"{x['x']:,.0f}" for x in xs)
        cvs = ", ".join("-" if x["cv"] is None else f"{100 * x['cv']:.1f}%" for x in xs)
        print(f"{name}: {len(xs)} runs, {tputs} samples/s; steps' cv {cvs}; "
              f"{sum(x['contended'] for x in xs)} flagged contended")
        print(f"  {len(pairs)} identical pairs called faster/slower: 2 % rule {old}, steps' spread {new}; of the "
              f"{len(quiet)} with no contended side: "
              f"{sum(not within_band(b['x'] / a['x'], BAND_FLOOR) for a, b in quiet)} and "
              f"{sum(not within_band(b['x'] / a['x'], noise_band(a, b)) for a, b in quiet)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--world-sizes", default="1,2")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--judge-only", action="store_true")
    args = ap.parse_args()
    if not args.judge_only:
        run_sweeps(args.out, args.runs, args.world_sizes, args.steps)
    judge(args.out)


if __name__ == "__main__":
    main()
