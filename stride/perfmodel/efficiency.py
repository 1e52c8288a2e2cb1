"""The few efficiency factors the cost model multiplies datasheet peaks by.

Each has one physical meaning, and nothing else in the model is fitted:
- gemm: fraction of dense peak a large, well-shaped GEMM sustains on a GPU (clock under the power
  limit, tile and wave effects); a hardware entry's measured `matmul_efficiency` replaces it.
- gemm_hopper: the same on Hopper and Blackwell GPUs, whose datasheet peak assumes a boost clock
  that dense tensor-core work under the board's power limit does not sustain (A100s run closer to
  theirs); Blackwell, with no development rows, takes Hopper's (the same power-limited design).
- gemm_tpu: the same for systolic-array TPUs, which run their MXUs at a fixed clock and reach a
  larger fraction of peak (a separate hardware class, fitted apart from the GPUs').
- attention: fraction of dense peak a fused (flash) attention kernel sustains on a device without
  a published figure; these kernels run softmax between their matmuls and reach less than a plain
  GEMM. A device's `attention_efficiency` (e.g. 0.35 for FlashAttention-2 on Hopper) is scaled by
  attention / 0.5, so fitting moves every device together and keeps their published ratios;
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
    gemm_hopper: float = 0.80
    gemm_tpu: float = 0.80
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


EFFICIENCY_FILE = Path(__file__).resolve().parents[2] / "data" / "perfmodel" / "efficiency.json"


def shipped_efficiency() -> Efficiency:
    """The factors fitted on every development row (benchmarks/perfmodel_error.py --write), or
    the unfitted priors where that file is absent; what `stride plan` uses unless --efficiency."""
    if EFFICIENCY_FILE.is_file():
        try:
            return load_efficiency(EFFICIENCY_FILE)
        except ConfigError:
            return Efficiency()
    return Efficiency()
