"""A CPU's peak FLOP/s per dtype from its instruction set: cores x clock x FLOPs per cycle per core.

MFU needs a ceiling no run can pass. A measured matmul is not one: it measures how good the
library's kernel for that dtype is (torch 2.13's CPU fp16 matmul on an AMD EPYC without AVX512_FP16
runs at 0.3 GFLOP/s, 600x below fp32, and a run's MFU against it read 414 %). The instruction set
bounds what the cores can do in any dtype, so the peak here comes from the flags in /proc/cpuinfo
(or torch's detected CPU capability where that file is missing):

- fp32: two vector FMA ports at the widest vector ISA (AVX-512F: 2 x 16 lanes x 2 FLOPs = 64 per
  cycle; AVX2+FMA: 32; AVX: 16; SSE2: 8; aarch64 NEON/SVE: 4 pipes x 4 lanes x 2 = 32).
- bf16: AMX-BF16 1024 per cycle (Intel's figure for one tile unit); AVX512_BF16 (VDPBF16PS, two
  products per fp32 lane) 128; aarch64 `bf16` 64; otherwise the fp32 units do the arithmetic after a
  conversion, so the fp32 figure.
- fp16: AMX-FP16 1024; AVX512_FP16 128 (32 lanes); aarch64 `asimdhp` 64; otherwise fp32's.

This is an upper bound by design: it assumes two full-width FMA ports, which Intel server parts
have; AMD Zen 4 executes 512-bit operations as two 256-bit halves, so its real ceiling is about half.
The clock is the highest the OS reports (cpufreq's maximum, else /proc/cpuinfo's `cpu MHz`, else the
`@ x GHz` of the model name). Only cpufreq's maximum is a boost clock: under a hypervisor `cpu MHz` is
often the base clock (an Intel Xeon guest under KVM reports 2.60 GHz while one core's fp32 GEMM runs at
220 GFLOP/s, 3.4 GHz x 64 FLOPs a cycle, so a peak at 2.60 GHz sat below what torch reaches). Where the
clock is not cpufreq's maximum, the clock used is at least the one a measured GEMM implies: its FLOP/s on
one core / the ISA's FLOPs a cycle for its dtype / `GEMM_SHARE_BOUND` (`gemm_clock_mhz`, measured once a
process, ~0.1 s), for fp32 and for each of bf16 and fp16 that has units of its own. Why not fp32 alone: torch's
fp32 GEMM is MKL's, which on AMD takes a slower path; on an AMD EPYC guest (family 26, model 2, `cpu MHz`
2.60 GHz) one core's fp32 GEMM ran at 110 GFLOP/s (1.9 GHz implied) while its bf16 GEMM (oneDNN, AVX512_BF16) ran at
486-511 GFLOP/s, above the 333 GFLOP/s bf16 peak at 2.60 GHz: 4.2 GHz x 128 FLOPs a cycle / 0.9 is the clock.
A run that still beats the peak gets `stride.metrics.peak.mfu_fields`'s loud error, never an MFU over 100 %.
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from stride.files.rank_share import ranks_sharing_cores, usable_cores
from stride.files.user_cache import cache_lock, read_json_cache, user_cache_dir, write_json_cache
from stride.metrics.matmul_rate import measured_matmul_peak

CPUINFO = Path("/proc/cpuinfo")
CPUFREQ_MAX = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")  # kHz

# (flag, FLOPs per cycle per core), first match wins; "*" matches any CPU. The module docstring says why.
_X86_FP32 = (("avx512f", 64), ("fma", 32), ("avx", 16), ("*", 8))
_X86_BF16 = (("amx_bf16", 1024), ("avx512_bf16", 128))
_X86_FP16 = (("amx_fp16", 1024), ("avx512_fp16", 128))
_ARM_FP32 = (("*", 32),)
_ARM_BF16 = (("bf16", 64),)
_ARM_FP16 = (("asimdhp", 64),)
# The best GEMM kernels reach about 0.9 of the FMA ports' rate (oneDNN's AVX-512 SGEMM) and a ceiling should
# err high, so a GEMM's measured FLOP/s / FLOPs a cycle / this share is a clock the core ran at, not above it.
GEMM_SHARE_BOUND = 0.9
# torch's capability names -> the flags they imply (where /proc/cpuinfo cannot be read).
_CAPABILITY_FLAGS = {"AVX512": {"avx512f", "fma", "avx"}, "AVX2": {"fma", "avx"}}


@dataclass(frozen=True)
class CpuInfo:
    model: str
    arch: str
    flags: frozenset[str]
    flags_source: str  # "/proc/cpuinfo" or "torch-capability:AVX2"
    mhz: float | None  # the highest clock the OS reports
    mhz_source: str
    physical_cores: int


def _first(pattern: str, text: str) -> str | None:
    m = re.search(pattern, text, re.MULTILINE)
    return m.group(1).strip() if m else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def read_cpu_info(cpuinfo: str | None = None, max_khz: str | None = None) -> CpuInfo:
    """What this machine says about its CPU (texts may be given, for other machines' files)."""
    text = _read(CPUINFO) if cpuinfo is None else cpuinfo
    khz = _read(CPUFREQ_MAX) if max_khz is None else max_khz
    arch = platform.machine()
    model = (_first(r"^model name\s*:(.*)$", text or "") or platform.processor() or arch)
    flags_line = _first(r"^(?:flags|Features)\s*:(.*)$", text or "")
    if flags_line is not None:
        flags, flags_source = frozenset(flags_line.split()), "/proc/cpuinfo"
    else:
        cap = torch.backends.cpu.get_cpu_capability()
        flags, flags_source = frozenset(_CAPABILITY_FLAGS.get(cap, set())), f"torch-capability:{cap}"
    mhz, mhz_source = None, "unknown"
    if khz and khz.strip().isdigit():
        mhz, mhz_source = int(khz.strip()) / 1e3, "clock: cpufreq max"
    elif text and (vals := re.findall(r"^cpu MHz\s*:\s*([0-9.]+)", text, re.MULTILINE)):
        mhz, mhz_source = max(float(v) for v in vals), "clock: cpuinfo MHz"
    elif ghz := re.search(r"@\s*([0-9.]+)\s*GHz", model):
        mhz, mhz_source = float(ghz.group(1)) * 1e3, "clock: model name"
    cores = {(_first(r"^physical id\s*:(.*)$", b), _first(r"^core id\s*:(.*)$", b))
             for b in (text or "").split("\n\n") if "core id" in b}
    return CpuInfo(model, arch, flags, flags_source, mhz, mhz_source, len(cores) or (os.cpu_count() or 1))


def flops_per_cycle(info: CpuInfo, dtype: str) -> tuple[int, str]:
    """(FLOPs per cycle per core, the flag that gave it) for fp32, bf16 or fp16."""
    arm = info.arch in ("aarch64", "arm64")
    fp32_rules = _ARM_FP32 if arm else _X86_FP32
    rules = {"fp32": fp32_rules,
             "bf16": (_ARM_BF16 if arm else _X86_BF16) + fp32_rules,
             "fp16": (_ARM_FP16 if arm else _X86_FP16) + fp32_rules}[dtype]
    for flag, n in rules:
        if flag == "*" or flag in info.flags:
            name = flag if flag != "*" else ("neon" if arm else "sse2")
            if dtype != "fp32" and (flag, n) in fp32_rules:
                name = f"no {dtype} ISA, fp32 units: {name}"
            return n, name
    raise AssertionError("the last rule matches every CPU")


def cores_in_use(info: CpuInfo, threads: int | None = None) -> int:
    """Physical cores the run's threads can occupy (SMT siblings share the FMA ports)."""
    try:
        allowed = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        allowed = os.cpu_count() or 1
    return max(1, min(threads or torch.get_num_threads(), allowed, info.physical_cores))


_GEMM_MHZ: dict[int, float] = {}  # the highest GEMM-implied clock seen in this process, by FLOPs a cycle


def clock_cache_path() -> Path:
    """cpu_clock.json in stride's cache folder: the highest GEMM-implied clock seen on each host."""
    return user_cache_dir() / "cpu_clock.json"


def flags_digest(info: CpuInfo) -> str:
    """A short digest of a CPU's instruction-set flags: part of the keys of what is measured per host."""
    return hashlib.sha256(" ".join(sorted(info.flags)).encode()).hexdigest()[:12]


def _host_clock_key(fp32_per_cycle: int) -> str:
    info = read_cpu_info()
    return f"{platform.node()}|{info.model}|flags:{flags_digest(info)}|{fp32_per_cycle}FLOP/cycle"


def gemm_clock_mhz(fp32_per_cycle: int, n: int = 512, seconds: float = 0.08, fresh: bool = False,
                   others: tuple[tuple[torch.dtype, int], ...] = ()) -> float:
    """The clock (MHz) one core ran at no lower than: torch's best n x n GEMM on one thread / FLOPs per cycle /
    GEMM_SHARE_BOUND, in fp32 and in each (dtype, FLOPs per cycle) of `others` (the dtypes with units of their own:
    on AMD, MKL's fp32 GEMM runs far below the FMA ports while oneDNN's bf16 GEMM does not, module docstring), the
    highest seen on this host (kept in `clock_cache_path`). Measured once a process, and again where `fresh`.

    One thread, so the other cores' load does not lower the GEMM itself. But the clock can: with the other
    core busy (a test worker, say), an Intel Xeon KVM guest (model 167) ran the GEMM at a rate implying
    3.12 GHz, and a later GEMM ran at 216.7 GFLOP/s (3.76 GHz at 0.9). A run that beats its peak therefore
    measures again (`stride.metrics.peak.mfu_fields`'s recheck), and the higher clock stays.
    Why kept per host: measured per process only, five runs of one config on that host read peaks of 3.63e11
    to 3.98e11 FLOP/s (clocks 2.83-3.11 GHz), so their MFUs differed by up to 10 % at equal FLOP/s. Each is a
    clock a core ran at, so the highest of them is a floor too, and runs on the host converge on one peak.
    `measured_matmul_peak` draws from its own generator, so the training RNG stays."""
    if fresh or fp32_per_cycle not in _GEMM_MHZ:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            mhz = max(measured_matmul_peak(torch.device("cpu"), dtype, n=n, seconds=seconds) / per_cycle
                      for dtype, per_cycle in ((torch.float32, fp32_per_cycle), *others)) / GEMM_SHARE_BOUND / 1e6
        finally:
            torch.set_num_threads(threads)
        path, key = clock_cache_path(), _host_clock_key(fp32_per_cycle)
        # several threads or processes (ranks, test workers) may write it at once: read and write under the lock,
        # so the highest clock stays
        with _CLOCK_FILE_LOCK, cache_lock(path):
            kept = read_json_cache(path)
            earlier = _clock_of(kept.get(key))
            _GEMM_MHZ[fp32_per_cycle] = max(mhz, earlier, _GEMM_MHZ.get(fp32_per_cycle, 0.0))
            if _GEMM_MHZ[fp32_per_cycle] > earlier:
                kept[key] = _GEMM_MHZ[fp32_per_cycle]
                write_json_cache(path, kept)
    return _GEMM_MHZ[fp32_per_cycle]


def own_unit_dtypes(info: CpuInfo) -> tuple[tuple[torch.dtype, int], ...]:
    """(dtype, FLOPs per cycle) of bf16 and fp16 where the instruction set has units of their own (not the fp32
    units after a conversion): their GEMMs imply a clock as fp32's does (`gemm_clock_mhz`)."""
    own = ((dtype, flops_per_cycle(info, name)) for name, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)))
    return tuple((dtype, n) for dtype, (n, why) in own if not why.startswith("no "))


_CLOCK_FILE_LOCK = threading.Lock()


def _clock_of(seen: object) -> float:
    return float(seen) if isinstance(seen, int | float) and math.isfinite(seen) and seen > 0 else 0.0


def peak_clock(info: CpuInfo, measure: bool, fresh: bool = False) -> tuple[float | None, str]:
    """(MHz, where it came from) for the peak: cpufreq's maximum as is; any other clock (or none) raised to the
    clock a measured GEMM implies where `measure` (this machine) and that is higher (`fresh`: measured
    again, see `gemm_clock_mhz`)."""
    if info.mhz_source == "clock: cpufreq max" or not measure:
        return info.mhz, info.mhz_source
    per_cycle, _ = flops_per_cycle(info, "fp32")
    floor = gemm_clock_mhz(per_cycle, fresh=fresh, others=own_unit_dtypes(info))
    if info.mhz is not None and info.mhz >= floor:
        return info.mhz, info.mhz_source
    os_said = (f"{info.mhz / 1e3:.2f} GHz from {info.mhz_source.removeprefix('clock: ')}" if info.mhz
               else "no clock from the OS")
    return floor, f"clock: a measured GEMM / {GEMM_SHARE_BOUND} ({os_said})"


def isa_peak(dtype: str, threads: int | None = None, info: CpuInfo | None = None,
             fresh: bool = False) -> tuple[float, str] | None:
    """(peak FLOP/s, source) of `dtype` on the cores this process's threads use; None without a clock.

    This machine's (no `info`): a clock other than cpufreq's maximum is raised to what a measured GEMM
    implies (`peak_clock`; `fresh`: measured again); another machine's `info` is taken as it says."""
    got = isa_peak_with_clock(dtype, threads, info, fresh)
    return None if got is None else (got[0], got[1])


def isa_peak_with_clock(dtype: str, threads: int | None = None, info: CpuInfo | None = None,
                        fresh: bool = False) -> tuple[float, str, float] | None:
    """`isa_peak` and the clock (MHz) it is at: summary.json records it beside the MFU, as the clock of one host
    can move between runs (a GEMM-implied clock only rises: 2.75 -> 3.53 GHz over ten runs, outside audit 13, L5)."""
    measure = info is None
    info = info or read_cpu_info()
    mhz, mhz_source = peak_clock(info, measure, fresh)
    if mhz is None:
        return None
    per_cycle, why = flops_per_cycle(info, dtype)
    cores, shared = core_share(info, cores_in_use(info, threads))
    source = f"isa:{dtype}:{cores:g}cores{shared} x {mhz / 1e3:.2f}GHz x {per_cycle}FLOP/cycle ({why}; {mhz_source})"
    return cores * mhz * 1e6 * per_cycle, source, mhz


def core_share(info: CpuInfo, cores: int) -> tuple[float, str]:
    """A rank's cores for its peak, and a note where the ranks sharing this process's cores (torchrun's
    LOCAL_WORLD_SIZE, unless each was pinned apart) ask for more than there are: 4 ranks of one thread on 2 cores
    (the host's, or a container's cpuset on a larger host) time-share them, so each rank's peak is half a core (each
    counting a whole core made the ranks' peaks add up to twice the machine and every MFU read half)."""
    local = ranks_sharing_cores() or 1
    machine = min(usable_cores(), info.physical_cores)
    if local > 1 and cores * local > machine:
        return machine / local, f" ({machine} cores shared by {local} ranks)"
    return float(cores), ""
