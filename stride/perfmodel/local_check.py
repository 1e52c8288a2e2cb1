"""Local CPU check of the model: calibrate on some measured runs, predict others, report the error.

1. measure the machine: `probe` (matmul peak, copy bandwidth, per-kernel and FSDP2 host overhead,
   one pinned thread) and a `stride comm` alpha-beta profile of 2 pinned gloo ranks;
2. run the calibration set (a tiny time-series transformer: 1 process at two batch sizes, DDP
   and FSDP2 at 2 ranks) and fit the factors to it;
3. run the held-out set (other models: a 4x larger transformer, an MLP; 1 process, DDP and FSDP2
   at 2 ranks) and compare the predicted step time with the measured median step.
Every run is pinned one core per rank, one thread, in a niced session (local_runs.py).

The same check on runs already made (any precision: fit on some, predict the others, errors per precision):
    python -m stride.perfmodel.local_check --hardware-file local.toml --fit RUN... --predict RUN...
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stride.config.errors import ConfigError
from stride.perfmodel.calibrate import RunInputs, calibrate, precision_notes, report, run_inputs
from stride.perfmodel.efficiency import PRECISIONS, Efficiency, load_efficiency
from stride.perfmodel.hardware import Hardware, load_catalog
from stride.perfmodel.local_runs import comm_profile, launch
from stride.perfmodel.probe import hardware_toml, probe_niced

TS_TINY = ["model.name=ts_transformer", "model.size=tiny", "data.seq_len=64", "data.n_assets=8", "data.n_steps=4096"]
TS_SMALL = ["model.name=ts_transformer", "model.size=small", "data.seq_len=64", "data.n_assets=8",
            "data.n_steps=4096"]
MLP = ["model.name=mlp", "model.size=small", "data.seq_len=16", "data.n_assets=8", "data.n_steps=4096"]
DDP = ["parallel.ddp_bucket_mb=1"]
FSDP = ["parallel.dp_shard=2"]


@dataclass(frozen=True)
class Run:
    name: str
    nproc: int
    overrides: tuple[str, ...]


CALIBRATION = (
    Run("tiny-1p-b32", 1, (*TS_TINY, "train.batch_size=32")),
    Run("tiny-1p-b64", 1, (*TS_TINY, "train.batch_size=64")),
    Run("mlp-1p-b128", 1, (*MLP, "train.batch_size=128")),
    Run("tiny-ddp2-b64", 2, (*TS_TINY, *DDP, "train.batch_size=64")),
    Run("tiny-fsdp2-b64", 2, (*TS_TINY, *FSDP, "train.batch_size=64")),
)
HELD_OUT = (
    Run("small-1p-b32", 1, (*TS_SMALL, "train.batch_size=32")),
    Run("small-ddp2-b64", 2, (*TS_SMALL, *DDP, "train.batch_size=64")),
    Run("small-fsdp2-b64", 2, (*TS_SMALL, *FSDP, "train.batch_size=64")),
    Run("mlp-1p-b256", 1, (*MLP, "train.batch_size=256")),
    Run("mlp-ddp2-b512", 2, (*MLP, *DDP, "train.batch_size=512")),
    Run("mlp-fsdp2-b512", 2, (*MLP, *FSDP, "train.batch_size=512")),
)


NEEDED_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")  # DDP; FSDP2


def _profiled(path: Path) -> set[str]:
    with path.open("rb") as fh:
        return set(tomllib.load(fh).get("collectives", {}))


def measure_machine(root: Path, tries: int = 3) -> Path:
    """Probe + comm profile -> a hardware TOML with a `local-cpu` entry. `stride comm` leaves out a collective
    whose timings it cannot fit (a loaded host: R^2 under its bound), so the profile is measured again, up to
    `tries` times, until it has every collective the runs use (an all-reduce left out was priced from the two
    others, or before that from an assumed link: 0.01 ms for 3 MB)."""
    prof = comm_profile(root / "gloo2.toml")
    best, best_n = prof.read_text(), len(_profiled(prof))
    for _ in range(tries - 1):
        if best_n == len(NEEDED_COLLECTIVES):
            break
        comm_profile(prof)
        if (n := len(_profiled(prof))) > best_n:
            best, best_n = prof.read_text(), n
    prof.write_text(best)  # the most complete of the tries
    hw_toml = root / "local.toml"
    hw_toml.write_text(hardware_toml("local-cpu", probe_niced(1), str(prof)))
    return hw_toml


def local_check(root: Path | None = None, steps: int = 12, rounds: int = 1,
                calibration: tuple[Run, ...] = CALIBRATION, held_out: tuple[Run, ...] = HELD_OUT,
                log: Callable[[str], None] = lambda s: None) -> dict:
    """Measure, calibrate, predict; returns per-run errors and the fitted factors.

    With `rounds` > 1 every run is repeated, the rounds interleaved (calibration and held-out runs
    alternate within each), and each run's measured step is the median over rounds."""
    root = Path(root or tempfile.mkdtemp(prefix="stride-local-check-"))
    hw_toml = measure_machine(root)
    hw = load_catalog(hw_toml).get("local-cpu")
    log(f"machine: {hw.peak_tflops} TFLOP/s, {hw.memory_bw_tbps * 1e3:.1f} GB/s, "
        f"kernel {hw.kernel_overhead_us:.2f} us, FSDP2 unit {hw.fsdp_unit_overhead_us:.0f} us")
    measured: dict[str, list[float]] = {}
    dirs: dict[str, Path] = {}
    for k in range(rounds):
        for run in (*calibration, *held_out):
            out = root / f"{run.name}-r{k}"
            rec = launch(out, [*run.overrides, f"train.steps={steps}"], run.nproc)
            measured.setdefault(run.name, []).append(rec["median_step_time_s"])
            dirs.setdefault(run.name, out)
            log(f"{run.name}: {rec['median_step_time_s'] * 1e3:.1f} ms")
    inputs = {}
    for name, d in dirs.items():
        ri = run_inputs(d)
        ri.measured_step_s = statistics.median(measured[name])
        inputs[name] = ri
    eff, cal = calibrate([inputs[r.name] for r in calibration], hw)
    held = [report(inputs[r.name], hw, eff) for r in held_out]
    errs = [abs(h["err_pct"]) for h in held]
    return {
        "hardware_toml": str(hw_toml), "hardware": {"peak_tflops": hw.peak_tflops, "memory_bw_tbps": hw.memory_bw_tbps,
                                                    "kernel_overhead_us": hw.kernel_overhead_us,
                                                    "fsdp_unit_overhead_us": hw.fsdp_unit_overhead_us},
        "efficiency": eff.to_dict(), "calibration": cal, "held_out": held,
        "held_out_median_abs_pct": statistics.median(errs), "held_out_max_abs_pct": max(errs),
        "rounds": rounds, "measured_rounds_s": measured,
    }


def merged_runs(dirs: list[Path]) -> list[RunInputs]:
    """One RunInputs per configuration: run directories with the same config.toml (repeats of one run, as
    local_check's rounds) count once, at the median of their measured steps (a shared host's load moves)."""
    groups: dict[str, list[RunInputs]] = {}
    for d in dirs:
        ri = run_inputs(Path(d))
        groups.setdefault((ri.run_dir / "config.toml").read_text(), []).append(ri)
    out = []
    for rs in groups.values():
        rs[0].measured_step_s = statistics.median(r.measured_step_s for r in rs)
        out.append(rs[0])
    return out


def _medians(rows: list[dict]) -> dict[str, float]:
    """Median |error| % per training precision."""
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["precision"], []).append(abs(r["err_pct"]))
    return {p: statistics.median(by[p]) for p in PRECISIONS if p in by}


def held_out(fit: list[Path], predict: list[Path], hw: Hardware, start: Efficiency | None = None) -> dict:
    """Calibrate on the `fit` runs, predict the `predict` runs; per-run errors and the median |error| per
    precision of each set. A run in both sets is refused: its error would not be held out."""
    fit_runs, pred_runs = merged_runs(fit), merged_runs(predict)
    seen = {(r.run_dir / "config.toml").read_text(): r.run_dir for r in fit_runs}
    both = [f"{r.run_dir} (as {seen[k]})" for r in pred_runs if (k := (r.run_dir / "config.toml").read_text()) in seen]
    if both:
        raise ValueError(f"runs to predict are also fitted (the same config.toml): {', '.join(both)}")
    eff, cal = calibrate(fit_runs, hw, start)
    held = [report(r, hw, eff) for r in pred_runs]
    slim = [{k: v for k, v in r.items() if k != "breakdown_s"} for r in (*cal, *held)]
    return {"hardware": hw.name, "efficiency": eff.to_dict(), "notes": precision_notes(fit_runs, eff, hw, start),
            "fit": slim[:len(cal)], "held_out": slim[len(cal):], "fit_median_abs_pct": _medians(cal),
            "held_out_median_abs_pct": _medians(held)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Calibrate on some measured runs, predict others: the error per "
                                             "training precision")
    ap.add_argument("--hardware-file", required=True, help="the `stride plan probe` TOML the runs ran on")
    ap.add_argument("--hardware", default="local-cpu")
    ap.add_argument("--efficiency", help="starting factors (a calibration JSON)")
    ap.add_argument("--fit", nargs="+", required=True, metavar="RUN", help="run directories to calibrate on")
    ap.add_argument("--predict", nargs="+", required=True, metavar="RUN", help="run directories to predict")
    args = ap.parse_args(argv)
    try:
        hw = load_catalog(args.hardware_file).get(args.hardware)
        start = load_efficiency(args.efficiency, note="local_check") if args.efficiency else None
        out = held_out([Path(d) for d in args.fit], [Path(d) for d in args.predict], hw, start)
    except (ConfigError, ValueError) as exc:
        print(f"local_check: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
