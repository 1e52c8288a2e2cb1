"""What each dtype's matmul measures on this host, kept per host, and the precision advice it allows.

A lower precision is worth recommending only where it is faster. On GPUs the datasheets say so; on a
CPU it depends on the instruction set and on the kernels torch ships: on this project's AMD EPYC
(AVX512_BF16, no AVX512_FP16) a 512^3 matmul ran at 2.3-2.6x fp32's rate in bf16 and at 1/50-1/90
in fp16, and the README's old first example (bf16 on another CPU) trained 7x slower than fp32. So the
advice asks the measurement: `measured_dtype_flops()` times one n x n matmul per dtype (a second or
two on the first call, once per host, thread count and torch version; kept in
~/.cache/stride/dtype_flops.json, see `cache_path`) and `precision_advice` recommends a dtype only where
it measured faster than fp32 by a margin, and outright only where the workload's own step did
(`stride profile` measures it; `stride bench` reads its precision variants).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from stride.metrics.cpu_isa import read_cpu_info
from stride.metrics.peak import measured_matmul_peak

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
FASTER = 1.2  # a dtype is recommended when its matmul ran at >= 1.2x fp32's (noise of the probe: a few %)
PROBE_N = 512
_MEMO: dict[str, dict[str, float]] = {}


def cache_path() -> Path:
    """$STRIDE_CACHE_DIR/dtype_flops.json, else under $XDG_CACHE_HOME/stride or ~/.cache/stride."""
    if os.environ.get("STRIDE_CACHE_DIR"):
        return Path(os.environ["STRIDE_CACHE_DIR"]) / "dtype_flops.json"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stride" / "dtype_flops.json"


def host_key(threads: int | None = None) -> str:
    """The host as far as dtype speed goes: CPU model and flags, threads, torch version."""
    info = read_cpu_info()
    flags = hashlib.sha256(" ".join(sorted(info.flags)).encode()).hexdigest()[:12]
    return f"{info.model}|flags:{flags}|threads:{threads or torch.get_num_threads()}|torch:{torch.__version__}"


def _load(path: Path) -> dict[str, dict[str, float]]:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # no cache yet, or a damaged one: measure again
    return obj if isinstance(obj, dict) else {}


def measured_dtype_flops(threads: int | None = None, seconds: float = 0.15) -> dict[str, float]:
    """{dtype: matmul FLOP/s} on this CPU, measured once per host key and kept on disk."""
    key = host_key(threads)
    if key in _MEMO:
        return _MEMO[key]
    path = cache_path()
    kept = _load(path)
    got = kept.get(key)
    if not (isinstance(got, dict) and set(got) == set(DTYPES)):
        cpu, before = torch.device("cpu"), torch.get_num_threads()
        torch.set_num_threads(threads or before)  # measured at the thread count the key names
        try:
            got = {name: measured_matmul_peak(cpu, dt, n=PROBE_N, seconds=seconds) for name, dt in DTYPES.items()}
        finally:
            torch.set_num_threads(before)
        kept[key] = got
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(kept, indent=1))
            tmp.replace(path)  # atomic: a reader sees the old file or the new one
        except OSError:
            pass  # a read-only home: the figures still hold for this process
    _MEMO[key] = got
    return got


@dataclass(frozen=True)
class DtypeSpeeds:
    """Speed per dtype measured on one machine (any unit, higher is faster) and what was measured:
    "matmul" (the host probe: an upper bound on what a dtype can gain) or "workload" (the run's own
    training step in each dtype: the answer)."""

    per_dtype: dict[str, float]
    basis: str  # "matmul" or "workload"


def host_speeds(threads: int | None = None) -> DtypeSpeeds:
    return DtypeSpeeds(measured_dtype_flops(threads), "matmul")


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
