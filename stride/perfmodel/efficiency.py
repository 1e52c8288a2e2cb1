"""The few efficiency factors the cost model multiplies datasheet peaks by.

Each has one physical meaning, and nothing else in the model is fitted:
- gemm: fraction of dense peak a large, well-shaped GEMM sustains (clock, tile and wave effects);
  a hardware entry's measured `matmul_efficiency` replaces it for that device.
- attention: fraction of dense peak a fused (flash) attention kernel sustains; these kernels
  run softmax between their matmuls and reach less than a plain GEMM;
- memory: fraction of datasheet memory bandwidth elementwise kernels reach.
- network: fraction of link bandwidth a collective reaches (NCCL bus bandwidth / line rate).
- overlap: fraction of communication hidden when it runs under compute (the rest slows compute:
  shared SMs and memory bandwidth).
- dispatch: a bare op's host overhead (the device's `kernel_overhead_us`) over a training kernel's
  (autograd, module hooks, Python around it): only traced workloads, which count their kernels.
Defaults are round physical priors, NOT fitted to any data set (docs/perfmodel.md reports
their error, and the error of factors fitted on half of the published rows and tested on the
other half); `stride plan calibrate` writes a JSON file with the same keys.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from stride.config.errors import ConfigError


@dataclass(frozen=True)
class Efficiency:
    gemm: float = 0.80
    attention: float = 0.50
    memory: float = 0.80
    network: float = 0.80
    overlap: float = 0.80
    dispatch: float = 0.25

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            hi = 3.0 if f.name == "memory" else 1.0  # memory: on a CPU, of a DRAM probe; caches beat it
            if not isinstance(v, int | float) or not 0 < v <= hi:
                raise ConfigError(f"efficiency `{f.name}` must be in (0, {hi:g}], got {v!r}")

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def load_efficiency(path: str | Path) -> Efficiency:
    """Read a calibration JSON ({"gemm": .., "memory": .., ...}; missing keys keep defaults)."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"efficiency file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    factors = data.get("efficiency", data) if isinstance(data, dict) else None
    if not isinstance(factors, dict):
        raise ConfigError(f"{path}: expected a JSON object of efficiency factors")
    names = {f.name for f in dataclasses.fields(Efficiency)}
    unknown = sorted(set(factors) - names)
    if unknown:
        raise ConfigError(f"{path}: unknown efficiency factor(s) {unknown}; known: {sorted(names)}")
    return Efficiency(**{k: float(v) for k, v in factors.items()})
