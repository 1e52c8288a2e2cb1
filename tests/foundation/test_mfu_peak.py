"""MFU is at most 100 % in every precision: the CPU peak comes from the instruction set (a ceiling),
and a run that beats its peak gets a loud error and a lower bound, never an MFU above 1."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from helpers import small_config

from stride.metrics.cpu_isa import flops_per_cycle, isa_peak, peak_clock, read_cpu_info
from stride.metrics.peak import Peak, PeakBelowAchievedWarning, measured_matmul_peak, mfu_fields
from stride.train.trainer import Trainer


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_mfu_is_at_most_one_in_every_precision(precision: str) -> None:
    """Before: the peak of a CPU dtype was a 1024^3 matmul's speed; torch's CPU fp16 matmul runs at
    ~0.3 GFLOP/s on this AMD EPYC (no AVX512_FP16), and an fp16 run read MFU 414 %."""
    cfg = small_config(train__steps=4, train__precision=precision, metrics__flops=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PeakBelowAchievedWarning)
        s = Trainer(config=cfg, write_run_dir=False).fit().summary
    assert s["mfu"] is not None and 0 < s["mfu"] <= 1.0, s
    assert s["mfu_error"] is None
    if read_cpu_info().mhz is not None:  # a clock is known: the peak is the instruction set's
        assert s["peak_flops_source"].startswith(f"isa:{precision}:1cores"), s["peak_flops_source"]


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_isa_peak_is_above_what_the_library_reaches(dtype: str) -> None:
    """The ceiling holds against the best kernel torch has for the dtype on this machine."""
    peak = isa_peak(dtype, threads=torch.get_num_threads())
    if peak is None:
        pytest.skip("the OS reports no CPU clock here: the peak falls back to a measured matmul")
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    reached = measured_matmul_peak(torch.device("cpu"), dt, n=512, seconds=0.2)
    if reached >= peak[0]:  # as a run does (mfu_fields' recheck): the clock measured again, the highest kept
        peak = isa_peak(dtype, threads=torch.get_num_threads(), fresh=True)
    assert reached < peak[0], (reached, peak)


def test_a_run_above_its_peak_is_an_error_not_an_mfu_over_one() -> None:
    cfg = small_config(train__steps=4, metrics__flops=True, metrics__peak_flops=1e3)  # 1 kFLOP/s: wrong
    with pytest.warns(PeakBelowAchievedWarning, match=r"MFU would be .* so that peak is wrong"):
        s = Trainer(config=cfg, write_run_dir=False).fit().summary
    assert s["mfu"] is None and "lower bound" in s["mfu_error"]
    assert s["peak_flops_per_s"] == s["achieved_flops_per_s"] > 1e3
    assert s["peak_flops_source"].startswith("lower-bound:achieved by this run (not config:metrics.peak_flops")


def test_mfu_fields_by_hand() -> None:
    assert mfu_fields(5.0, Peak(10.0, "x"))["mfu"] == 0.5
    assert mfu_fields(None, Peak(10.0, "x"))["mfu"] is None
    with pytest.warns(PeakBelowAchievedWarning):
        f = mfu_fields(20.0, Peak(10.0, "x"))
    assert f["mfu"] is None and f["peak_flops_per_s"] == 20.0


# /proc/cpuinfo excerpts of other machines (one processor block each, flags trimmed to the vector ISA).
SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
cpu MHz\t\t: 2000.000
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512bw avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8

processor\t: 1
physical id\t: 0
core id\t\t: 1
flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512bw avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
"""
# an AMD EPYC guest under KVM (family 26, model 2): `cpu MHz` is the base clock; AVX512_BF16, no AMX, no AVX512_FP16
EPYC_ZEN5 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
cpu MHz\t\t: 2600.000
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512bw avx512_bf16 avx512_vnni
"""
HASWELL = """processor\t: 0
model name\t: Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse sse2 avx fma avx2 f16c
"""
GRAVITON3 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid sve bf16 i8mm
CPU implementer\t: 0x41
"""


def test_flops_per_cycle_follow_the_instruction_set(monkeypatch) -> None:
    spr = read_cpu_info(SAPPHIRE_RAPIDS, "3800000")
    assert spr.mhz == 3800.0 and spr.mhz_source == "clock: cpufreq max" and spr.physical_cores == 2
    assert [flops_per_cycle(spr, d)[0] for d in ("fp32", "bf16", "fp16")] == [64, 1024, 128]
    peak, source = isa_peak("bf16", threads=2, info=spr)
    assert peak == 2 * 3.8e9 * 1024 and "amx_bf16" in source
    hsw = read_cpu_info(HASWELL, "")
    assert hsw.mhz == 2500.0 and hsw.mhz_source == "clock: model name"
    # no bf16 or fp16 arithmetic: the fp32 units do it after a conversion, so fp32's ceiling
    assert [flops_per_cycle(hsw, d)[0] for d in ("fp32", "bf16", "fp16")] == [32, 32, 32]
    assert "no bf16 ISA" in flops_per_cycle(hsw, "bf16")[1]
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    arm = read_cpu_info(GRAVITON3, "")
    assert arm.mhz is None and isa_peak("fp32", info=arm) is None  # no clock: the caller measures instead
    assert [flops_per_cycle(arm, d)[0] for d in ("fp32", "bf16", "fp16")] == [32, 64, 64]


def test_a_clock_below_what_a_gemm_implies_is_raised_to_it() -> None:
    """Before: an Intel Xeon guest under KVM reports `cpu MHz` 2600 (its base clock) while one core's fp32 GEMM
    runs at 220 GFLOP/s (3.4 GHz x 64 FLOPs a cycle): the ISA peak sat below what torch reaches, so MFU could
    pass 100 %. A clock other than cpufreq's maximum is now raised to the one a measured GEMM implies."""
    slow = read_cpu_info(SAPPHIRE_RAPIDS.replace("2000.000", "100.000"), "")  # a 100 MHz claim, no cpufreq
    assert slow.mhz == 100.0 and slow.mhz_source == "clock: cpuinfo MHz"
    mhz, source = peak_clock(slow, measure=True)
    per_cycle = flops_per_cycle(slow, "fp32")[0]
    gemm = measured_matmul_peak(torch.device("cpu"), torch.float32, n=256, seconds=0.05) / torch.get_num_threads()
    assert mhz > 100.0 and mhz * 1e6 * per_cycle > 0.5 * gemm, (mhz, gemm)  # one thread's GEMM at 100 MHz: impossible
    assert source.startswith("clock: a measured GEMM") and "0.10 GHz from cpuinfo MHz" in source
    assert peak_clock(slow, measure=False) == (100.0, "clock: cpuinfo MHz")  # another machine's text: as it says
    boxed = read_cpu_info(SAPPHIRE_RAPIDS, "100000")  # cpufreq's maximum is a boost clock: kept as is
    assert peak_clock(boxed, measure=True) == (100.0, "clock: cpufreq max")
    fast = read_cpu_info(SAPPHIRE_RAPIDS.replace("2000.000", "99000.000"), "")  # above the GEMM's clock: kept
    assert peak_clock(fast, measure=True) == (99000.0, "clock: cpuinfo MHz")


def test_a_run_above_a_gemm_clocked_peak_measures_the_clock_again(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """The GEMM that sets a KVM guest's clock ran while the other core was busy: 3.12 GHz implied, and a later
    GEMM ran at 216.7 GFLOP/s, above that peak (`make test`, Intel Xeon model 167). A run above its peak now
    measures the clock again and keeps the highest; only a run above that too is an error."""
    import stride.metrics.cpu_isa as cpu_isa

    rates = iter([100e9, 300e9, 50e9])  # one core's GEMM: slow at start, fast on the recheck, slow after
    monkeypatch.setattr(cpu_isa, "measured_matmul_peak",
                        lambda device, dtype, **k: next(rates) if dtype == torch.float32 else 0.0)
    monkeypatch.setattr(cpu_isa, "_GEMM_MHZ", {})
    monkeypatch.setenv("STRIDE_CACHE_DIR", str(tmp_path))  # no clock kept by earlier tests
    slow = read_cpu_info(SAPPHIRE_RAPIDS.replace("2000.000", "100.000"), "")
    mhz0, _ = peak_clock(slow, measure=True)
    mhz1, _ = peak_clock(slow, measure=True, fresh=True)
    mhz2, _ = peak_clock(slow, measure=True, fresh=True)
    per = flops_per_cycle(slow, "fp32")[0]
    assert mhz0 == pytest.approx(100e9 / per / 0.9 / 1e6) and mhz1 == pytest.approx(300e9 / per / 0.9 / 1e6)
    assert mhz2 == mhz1  # a slower measurement never lowers the clock
    low, high = Peak(1e11, "isa:fp32"), Peak(3e11, "isa:fp32")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PeakBelowAchievedWarning)
        f = mfu_fields(2e11, low, recheck=lambda: high)
    assert f["mfu"] == pytest.approx(2 / 3) and f["mfu_error"] is None and f["peak_flops_per_s"] == 3e11
    with pytest.warns(PeakBelowAchievedWarning):
        f = mfu_fields(4e11, low, recheck=lambda: high)
    assert f["mfu"] is None and f["peak_flops_per_s"] == 4e11


def test_the_gemm_clock_is_kept_per_host_so_runs_share_one_peak(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    """Measured once a process only, five runs of one config on the Intel Xeon KVM guest read peaks of 3.63e11 to
    3.98e11 FLOP/s, so equal FLOP/s gave MFUs 10 % apart. The highest clock seen on the host is now kept on disk:
    a later process (its own GEMM slower) takes it, a faster one raises it, a damaged file is measured again."""
    import stride.metrics.cpu_isa as cpu_isa

    monkeypatch.setenv("STRIDE_CACHE_DIR", str(tmp_path))
    slow = read_cpu_info(SAPPHIRE_RAPIDS.replace("2000.000", "100.000"), "")
    per = flops_per_cycle(slow, "fp32")[0]

    def process(rate: float) -> float:  # a new process: nothing in memory, one GEMM at `rate`
        monkeypatch.setattr(cpu_isa, "_GEMM_MHZ", {})
        monkeypatch.setattr(cpu_isa, "measured_matmul_peak", lambda *a, **k: rate)
        return peak_clock(slow, measure=True)[0]

    first = process(200e9)
    assert first == pytest.approx(200e9 / per / 0.9 / 1e6)
    assert process(150e9) == first  # a slower GEMM in a later process: the host's clock stays
    assert process(250e9) == pytest.approx(250e9 / per / 0.9 / 1e6)  # a faster one raises it for later runs
    assert process(100e9) == pytest.approx(250e9 / per / 0.9 / 1e6)
    cpu_isa.clock_cache_path().write_text("{not json")
    assert process(120e9) == pytest.approx(120e9 / per / 0.9 / 1e6)  # damaged: measured again, and kept
    assert process(100e9) == pytest.approx(120e9 / per / 0.9 / 1e6)


def test_a_file_system_without_flock_does_not_stop_the_clock_cache(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """Lustre mounted without flock answers ENOSYS: the cache is then written without its lock, not the run ended
    (a review's find: the peak measurement at set-up raised "Function not implemented")."""
    import errno
    import fcntl

    import stride.metrics.cpu_isa as cpu_isa

    def no_flock(fd: int, op: int) -> None:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setenv("STRIDE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(fcntl, "flock", no_flock)
    monkeypatch.setattr(cpu_isa, "_GEMM_MHZ", {})
    monkeypatch.setattr(cpu_isa, "measured_matmul_peak", lambda *a, **k: 200e9)
    slow = read_cpu_info(SAPPHIRE_RAPIDS.replace("2000.000", "100.000"), "")
    assert peak_clock(slow, measure=True)[0] == pytest.approx(200e9 / 64 / 0.9 / 1e6)
    assert cpu_isa.clock_cache_path().is_file()


def test_summary_records_the_clock_of_its_cpu_peak() -> None:
    """Outside audit 13, L5: the clock behind a CPU peak moved 2.75 -> 3.53 GHz over ten runs on one host and was only
    in the source string; summary.json records it as a number, the one the peak is cores x clock x FLOPs a cycle of."""
    import re

    s = Trainer(config=small_config(train__steps=3, metrics__flops=True), write_run_dir=False).fit().summary
    m = re.match(r"isa:fp32:(\d+)cores x ([\d.]+)GHz x (\d+)FLOP/cycle", s["peak_flops_source"])
    if m is None:
        pytest.skip(f"no instruction-set peak here ({s['peak_flops_source']}): no clock to record")
    cores, shown, per_cycle = int(m[1]), float(m[2]), int(m[3])
    assert s["peak_clock_ghz"] == pytest.approx(shown, abs=0.005)  # the source shows it to 0.01 GHz
    assert s["peak_flops_per_s"] == pytest.approx(cores * s["peak_clock_ghz"] * 1e9 * per_cycle, rel=1e-12)
    # a peak that is not a clock's (config, datasheet, a lower bound) records none
    assert mfu_fields(5.0, Peak(10.0, "config:metrics.peak_flops"))["peak_clock_ghz"] is None


def test_a_bf16_gemm_faster_than_the_fp32_one_sets_the_clock(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`make test` on an AMD EPYC guest (family 26, model 2; `cpu MHz` 2.60 GHz) failed: torch's fp32 GEMM is MKL's,
    which runs a slower path on AMD (110 GFLOP/s on one core, 1.9 GHz implied), while its bf16 GEMM (oneDNN,
    AVX512_BF16) ran at 511 GFLOP/s, above the bf16 peak of 2.60 GHz x 128 FLOPs a cycle = 333 GFLOP/s: a bf16 run's
    MFU was an error there. The clock is now the highest any dtype with units of its own implies; fp16, which this
    CPU does on its fp32 units (1.3 GFLOP/s here), is not measured."""
    import stride.metrics.cpu_isa as cpu_isa

    rates = {torch.float32: 110e9, torch.bfloat16: 486e9}
    timed: list[torch.dtype] = []

    def gemm(device: torch.device, dtype: torch.dtype, **k: object) -> float:
        timed.append(dtype)
        return rates[dtype]

    monkeypatch.setattr(cpu_isa, "measured_matmul_peak", gemm)
    monkeypatch.setattr(cpu_isa, "_GEMM_MHZ", {})
    monkeypatch.setenv("STRIDE_CACHE_DIR", str(tmp_path))
    zen5 = read_cpu_info(EPYC_ZEN5, "")
    assert zen5.mhz == 2600.0 and [flops_per_cycle(zen5, d)[0] for d in ("fp32", "bf16", "fp16")] == [64, 128, 64]
    mhz, source = peak_clock(zen5, measure=True)
    assert sorted(timed, key=str) == [torch.bfloat16, torch.float32]
    assert mhz == pytest.approx(486e9 / 128 / 0.9 / 1e6) and "2.60 GHz from cpuinfo MHz" in source
    assert mhz * 1e6 * 128 > rates[torch.bfloat16]  # the bf16 peak holds against the bf16 GEMM


@pytest.mark.parametrize(("local", "threads", "physical", "want"),
                         [(4, 1, 2, 0.5), (2, 2, 2, 1.0), (2, 1, 2, 1.0), (1, 2, 2, 2.0),
                          (4, 1, 64, 0.5)])  # the review: a 2-CPU cpuset on a 64-core host
def test_ranks_sharing_the_cores_share_the_peak(monkeypatch: pytest.MonkeyPatch, local: int, threads: int,
                                                physical: int, want: float) -> None:
    """4 ranks of one thread on 2 cores: each rank's peak counted a whole core, so the ranks' peaks added up to twice
    the machine and every rank's MFU read half (outside audit of the parallel layouts)."""
    import dataclasses

    from stride.metrics.cpu_isa import isa_peak_with_clock

    info = dataclasses.replace(read_cpu_info(), physical_cores=physical, mhz=3000.0, mhz_source="clock: cpufreq max")
    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local))
    monkeypatch.delenv("STRIDE_RANKS_PINNED_APART", raising=False)
    peak, source, _ = isa_peak_with_clock("fp32", threads, info)
    per_cycle, _ = flops_per_cycle(info, "fp32")
    assert peak == pytest.approx(want * 3000e6 * per_cycle)
    assert peak * local <= 2 * 3000e6 * per_cycle * (1 + 1e-12)  # the node's ranks never exceed the cores they have
    assert source.startswith(f"isa:fp32:{want:g}cores"), source
    monkeypatch.setenv("STRIDE_RANKS_PINNED_APART", "1")  # each rank on cores of its own: its own affinity's peak
    assert isa_peak_with_clock("fp32", threads, info)[0] == pytest.approx(min(threads, 2) * 3000e6 * per_cycle)
