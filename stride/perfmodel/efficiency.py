"""The few efficiency factors the cost model multiplies published per-part figures by.

Per-part physics lives in the hardware catalog and the kernel tables, each value cited there: the
best large GEMM a part sustains at its power limit (MAMF, `mamf_tflops`), the published fused-
attention curves (attention_kernels.py), the NCCL bus bandwidth a link reaches (`*_busbw_fraction`).
What is left to fit is one number per kind of work, shared by every part, so a part no development
row ran on is predicted from its own published figures, never from a factor fitted to its kind:
- gemm: fraction of the part's MAMF the GEMMs of a training step reach (their shapes are smaller and
  less regular than the best one); on a part without a MAMF figure, of its peak.
- gemm_tpu: fraction of peak for TPUs, which have no published MAMF figure (a separate hardware
  class: systolic arrays at a fixed clock, XLA's own tiling).
- attention: fraction of dense peak a fused attention kernel reaches where no published curve
  covers the part (TPUs, CPUs, traced stride workloads).
- flash: multiplier on the published attention curves (1.0: as in the kernel authors' figures).
- memory: fraction of datasheet memory bandwidth elementwise kernels reach.
- network: multiplier on the catalog's achievable bus bandwidth (1.0: as nccl-tests publish it).
- overlap: fraction of communication hidden when it runs under compute (the rest slows compute:
  shared SMs and memory bandwidth).
- dispatch: a bare op's host overhead (the device's `kernel_overhead_us`) over a training kernel's
  (autograd, module hooks, Python around it): only traced workloads, which count their kernels.
- attention_<precision>, dispatch_<precision> (fp32, bf16, fp16): those two factors for the steps of one
  training precision alone; unset (None) unless `stride plan calibrate` fitted them on runs covering
  more than one precision, and where unset the shared factor serves. Why these two (measured with
  torch.profiler on an Intel Xeon with AMX, one thread, torch 2.13, a small MLP and transformer): the
  probe's 1024^3 bf16 matmul ran 7.1x fp32's, but the step's bf16 GEMMs only 1.5-2.1x, because each
  bf16 GEMM call paid a fixed 0.1-0.2 ms (its FLOPs ran near the 1024^3 rate), and autocast added a
  cast kernel per weight and activation; both are per-kernel costs, so bf16 steps have their own
  `dispatch` (a kernel of a bf16 step cost ~30x the probe's bare op). And bf16 flash attention's
  backward ran 7-14x *slower* than fp32's (head dim 16-32), so bf16 has its own `attention`. The
  GEMM FLOP term stays shared: fitted on all the runs, gemm came out 0.92 of each dtype's own peak.
Defaults are round physical priors, NOT fitted to any data set; `data/perfmodel/efficiency.json`
holds the ones fitted on every development row (benchmarks/perfmodel_error.py --write, whose
held-out errors docs/perfmodel.md reports); `stride plan calibrate` writes a JSON with the same keys.
A JSON that states only some factors takes the rest from that shipped fit, not from these priors.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from stride.config.errors import ConfigError
from stride.files.input_file import InputFileError, read_input_text

PRECISIONS = ("fp32", "bf16", "fp16")  # a traced workload's training precision (train.precision)
PER_PRECISION = ("attention", "dispatch")  # the factors a precision may have its own of (`dispatch_bf16`, ...)
OWN_FACTORS = tuple(f"{k}_{p}" for k in PER_PRECISION for p in PRECISIONS)


@dataclass(frozen=True)
class Efficiency:
    gemm: float = 0.90
    gemm_tpu: float = 0.80
    attention: float = 0.50
    flash: float = 1.0
    memory: float = 0.80
    network: float = 1.0
    overlap: float = 0.85
    dispatch: float = 0.25
    # one precision's own factors (OWN_FACTORS); None: the shared one above
    attention_fp32: float | None = None
    attention_bf16: float | None = None
    attention_fp16: float | None = None
    dispatch_fp32: float | None = None
    dispatch_bf16: float | None = None
    dispatch_fp16: float | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None and f.name in OWN_FACTORS:
                continue
            hi = {"memory": 3.0, "flash": 2.0, "network": 1.5}.get(f.name, 1.0)  # memory: a CPU's caches beat DRAM
            if not isinstance(v, int | float) or not 0 < v <= hi:
                raise ConfigError(f"efficiency `{f.name}` must be in (0, {hi:g}], got {v!r}")

    def to_dict(self) -> dict[str, float]:
        """The factors by name; a precision's own factors only where set (a file without them reads as before)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None or k not in OWN_FACTORS}

    def for_precision(self, name: str, precision: str) -> float:
        """Factor `name` (attention, dispatch) for steps trained at `precision`: its own where set, else shared."""
        if name not in PER_PRECISION:
            raise ValueError(f"efficiency `{name}` has no per-precision factors (only {', '.join(PER_PRECISION)})")
        own = getattr(self, f"{name}_{precision}", None) if precision in PRECISIONS else None
        return getattr(self, name) if own is None else own

    def own_precisions(self) -> list[str]:
        """Precisions with at least one factor of their own."""
        return [p for p in PRECISIONS if any(getattr(self, f"{k}_{p}") is not None for k in PER_PRECISION)]


# factors of earlier versions, now published per-part figures (hardware.toml mamf_tflops): ignored
RETIRED = ("gemm_hopper",)


_MAX_FILE_BYTES = 16 << 20  # an efficiency JSON is a few hundred bytes


def read_json(path: str | Path) -> object:
    """A calibration JSON's content; a ConfigError naming the file where it is missing, not a regular file (a FIFO
    or /dev/zero is never read), too large, not UTF-8 or not JSON."""
    try:
        return json.loads(read_input_text(path, limit=_MAX_FILE_BYTES, what="efficiency file"))
    except InputFileError as exc:
        raise ConfigError(str(exc)) from None
    except ValueError as exc:  # JSONDecodeError, and an integer over 4300 digits (a plain ValueError: a traceback)
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    except RecursionError:  # arrays nested thousands deep: a traceback from json (audit 14, L4)
        raise ConfigError(f"{path}: not valid JSON: nested too deeply to read") from None


def read_factors(path: str | Path, data: object = None) -> dict[str, float]:
    """The factors a calibration JSON states ({"gemm": .., ...} or {"efficiency": {...}}), by name; unknown names
    are an error naming the known ones, retired ones are dropped. `data`: the file's content where the caller
    read it already (read_json), so a file is read once."""
    if data is None:
        data = read_json(path)
    factors = data.get("efficiency", data) if isinstance(data, dict) else None
    if not isinstance(factors, dict):
        raise ConfigError(f"{path}: expected a JSON object of efficiency factors")
    names = {f.name for f in dataclasses.fields(Efficiency)}
    factors = {k: v for k, v in factors.items() if k not in RETIRED}
    unknown = sorted(set(factors) - names)
    if unknown:
        raise ConfigError(f"{path}: unknown efficiency factor(s) {unknown}; known: {sorted(names)}")
    out: dict[str, float] = {}
    for k, v in factors.items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            raise ConfigError(f"{path}: efficiency `{k}` must be a number, got {v!r}") from None
    return out


def load_efficiency(path: str | Path, base: Efficiency | None = None, note: str | None = None,
                    data: object = None) -> Efficiency:
    """Read a calibration JSON; the factors it does not state come from `base`, by default the shipped fit
    (shipped_efficiency), not the unfitted priors: '{"gemm": 0.8}' changes gemm alone. With `note` (a
    command's name), which factors were taken from the base is said once on stderr. `data`: as read_factors."""
    factors = read_factors(path, data)
    if base is None:
        base = shipped_efficiency()
    missing = [f.name for f in dataclasses.fields(Efficiency) if f.name not in factors and f.name not in OWN_FACTORS]
    if missing and note:
        import sys

        fitted = "the shipped fit (data/perfmodel/efficiency.json)" if EFFICIENCY_FILE.is_file() else \
            "the unfitted priors (no data/perfmodel/efficiency.json)"
        print(f"{note}: note: {path} does not set {', '.join(missing)}: taken from {fitted}", file=sys.stderr)
    return dataclasses.replace(base, **factors)


EFFICIENCY_FILE = Path(__file__).resolve().parents[2] / "data" / "perfmodel" / "efficiency.json"


def shipped_efficiency() -> Efficiency:
    """The factors fitted on every development row (benchmarks/perfmodel_error.py --write), or
    the unfitted priors where that file is absent; what `stride plan` uses unless --efficiency."""
    if EFFICIENCY_FILE.is_file():
        try:
            return load_efficiency(EFFICIENCY_FILE, base=Efficiency())
        except ConfigError:
            return Efficiency()
    return Efficiency()
