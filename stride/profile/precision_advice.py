"""Precision advice from measured speeds: recommend a lower precision only where it measured faster.

Pure logic, no measurement: `stride.metrics.dtype_speed` measures a host's matmul per dtype, `stride
profile` a workload's own step, and the verdicts of `stride analyze`, `stride profile` and `stride bench`
ask this module what those measurements allow (see `stride.metrics.dtype_speed` for why a faster matmul
alone is not enough).
"""

from __future__ import annotations

from dataclasses import dataclass

FASTER = 1.2  # a dtype is recommended when it ran at >= 1.2x fp32's (noise of the probe: a few %)


@dataclass(frozen=True)
class DtypeSpeeds:
    """Speed per dtype measured on one machine (any unit, higher is faster) and what was measured:
    "matmul" (the host probe: an upper bound on what a dtype can gain) or "workload" (the run's own
    training step in each dtype: the answer)."""

    per_dtype: dict[str, float]
    basis: str  # "matmul" or "workload"


def precision_advice(device: str, current: str | None, speeds: DtypeSpeeds | None) -> str | None:
    """Which lower precision to try, with the evidence; None where none measured faster.

    `device` is "cpu" or "gpu"; `current` the run's precision (None: unknown); `speeds` measured on
    the machine that ran (None: not measured there). GPUs without a measurement follow the datasheets
    (bf16 tensor cores run 2x or more fp32's rate); a CPU without one gets no precision advice, since
    a CPU's low-precision kernels can be hundreds of times slower. A faster matmul alone is not a
    faster step (autocast's casts can cost more on a small model: the quick-start transformer trained
    at 0.61x fp32's speed in bf16 on a CPU whose bf16 matmul ran 2.6x fp32's), so the advice then says
    to measure the step."""
    if current in ("bf16", "fp16"):
        return None
    if speeds is None:
        return "bf16 autocast (tensor cores: 2x or more fp32's FLOP/s on every datasheet)" if device == "gpu" else None
    per = speeds.per_dtype
    base = per.get("fp32") or 0.0
    best = max((d for d in ("bf16", "fp16") if per.get(d)), key=lambda d: per[d], default=None)
    if best is None or base <= 0 or per[best] < FASTER * base:
        return None
    ratio = per[best] / base
    if speeds.basis == "workload":
        return f"{best} autocast: this workload's step measured {ratio:.2f}x fp32's speed on this machine"
    return (f"{best} autocast may help: its matmul ran {ratio:.1f}x fp32's on this machine, but on small models "
            f"the casts can cost more; measure the step first (`stride bench --sweep tradeoffs --variants "
            f"baseline {best}`)")


def slower_precisions(speeds: DtypeSpeeds | None) -> list[str]:
    """Dtypes that measured slower than fp32 (named in advice so nobody tries them)."""
    if speeds is None:
        return []
    base = speeds.per_dtype.get("fp32") or 0.0
    return [d for d in ("bf16", "fp16") if base and speeds.per_dtype.get(d, base) < base]


def precision_line(device: str, current: str | None, speeds: DtypeSpeeds | None) -> str | None:
    """The recommendation line about precision: which dtype to try, or which measured slower."""
    advice = precision_advice(device, current, speeds)
    if advice:
        return ("use " if speeds is None or speeds.basis == "workload" else "") + advice + (
            "; TF32 for the fp32 matmuls left" if device == "gpu" else "")
    slow = slower_precisions(speeds) if current in (None, "fp32") else []
    if slow:
        what = "this workload's step" if speeds and speeds.basis == "workload" else "the matmul"
        return f"keep fp32: in {' and '.join(slow)} {what} measured slower than in fp32 on this machine"
    return None
