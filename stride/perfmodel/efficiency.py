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

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            hi = {"memory": 3.0, "flash": 2.0, "network": 1.5}.get(f.name, 1.0)  # memory: a CPU's caches beat DRAM
            if not isinstance(v, int | float) or not 0 < v <= hi:
                raise ConfigError(f"efficiency `{f.name}` must be in (0, {hi:g}], got {v!r}")

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


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
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None


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
    missing = [f.name for f in dataclasses.fields(Efficiency) if f.name not in factors]
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
