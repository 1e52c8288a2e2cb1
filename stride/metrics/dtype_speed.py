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

from pathlib import Path

import torch

from stride.files.strict_json import finite_number
from stride.files.user_cache import cache_lock, read_json_cache, user_cache_dir, write_json_cache
from stride.metrics.cpu_isa import flags_digest, read_cpu_info
from stride.metrics.peak import measured_matmul_peak
from stride.profile.precision_advice import FASTER, DtypeSpeeds, precision_line

__all__ = ["FASTER", "DtypeSpeeds", "host_speeds", "measured_dtype_flops", "precision_line", "speeds_of_trace"]

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PROBE_N = 512
_MEMO: dict[str, dict[str, float]] = {}


def cache_path() -> Path:
    """dtype_flops.json in stride's cache folder (`stride.files.user_cache`)."""
    return user_cache_dir() / "dtype_flops.json"


def host_key(threads: int | None = None) -> str:
    """The host as far as dtype speed goes: CPU model and flags, threads, torch version."""
    info = read_cpu_info()
    threads = threads or torch.get_num_threads()
    return f"{info.model}|flags:{flags_digest(info)}|threads:{threads}|torch:{torch.__version__}"


def _figures(got: object) -> bool:
    """Is `got` what measured_dtype_flops keeps for a host: each dtype's FLOP/s, a finite number above 0?"""
    return isinstance(got, dict) and set(got) == set(DTYPES) and all(finite_number(v) and v > 0 for v in got.values())


def measured_dtype_flops(threads: int | None = None, seconds: float = 0.15) -> dict[str, float]:
    """{dtype: matmul FLOP/s} on this CPU, measured once per host key and kept on disk."""
    key = host_key(threads)
    if key in _MEMO:
        return _MEMO[key]
    path = cache_path()
    kept = read_json_cache(path)
    got = kept.get(key)
    if not _figures(got):  # none yet, or damaged or edited: measured again (a "x" or NaN left the advice a traceback)
        cpu, before = torch.device("cpu"), torch.get_num_threads()
        torch.set_num_threads(threads or before)  # measured at the thread count the key names
        try:
            got = {name: measured_matmul_peak(cpu, dt, n=PROBE_N, seconds=seconds) for name, dt in DTYPES.items()}
        finally:
            torch.set_num_threads(before)
        with cache_lock(path):  # other processes may add their hosts' figures meanwhile: read again, then write
            kept = read_json_cache(path)
            kept[key] = got
            write_json_cache(path, kept)
    _MEMO[key] = got
    return got


def host_speeds(threads: int | None = None) -> DtypeSpeeds:
    return DtypeSpeeds(measured_dtype_flops(threads), "matmul")


def speeds_of_trace(on_device: bool, host_name: str | None) -> DtypeSpeeds | None:
    """This host's measured matmul speed per dtype, for a CPU trace recorded on this host (same host
    name); None otherwise (a GPU, or another machine, whose speeds this host cannot measure)."""
    import platform

    if on_device or host_name != platform.node():
        return None
    return host_speeds()
