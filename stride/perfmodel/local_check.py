"""Local CPU check of the model: calibrate on some measured runs, predict others, report the error.

1. measure the machine: `probe` (matmul peak, copy bandwidth, per-kernel and FSDP2 host overhead,
   one pinned thread) and a `stride comm` alpha-beta profile of 2 pinned gloo ranks;
2. run the calibration set (a tiny time-series transformer: 1 process at two batch sizes, DDP
   and FSDP2 at 2 ranks) and fit the factors to it;
3. run the held-out set (other models: a 4x larger transformer, an MLP; 1 process, DDP and FSDP2
   at 2 ranks) and compare the predicted step time with the measured median step.
Every run is pinned one core per rank, one thread, in a niced session (local_runs.py).
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stride.perfmodel.calibrate import calibrate, report, run_inputs
from stride.perfmodel.hardware import load_catalog
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


def measure_machine(root: Path) -> Path:
    """Probe + comm profile -> a hardware TOML with a `local-cpu` entry."""
    prof = comm_profile(root / "gloo2.toml")
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
