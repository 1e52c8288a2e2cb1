"""`stride plan calibrate RUNS...`: fit the efficiency factors to measured stride runs.

Each run directory holds `config.toml` (the resolved run config) and `summary.json` (the
trainer's: `step_time_s`, `world_size`); runs measured with `stride.perfmodel.local_runs` also
hold `rank0.json`, whose median step time is used (robust to a busy machine's outliers). The
run's model is censused (census_step.py), so any stride workload calibrates; its layout comes from
`[parallel]` and `[train]` and the world size. Single-process runs inform the compute factors
(gemm, attention, memory, dispatch); runs with several processes also network and overlap.
Where the runs cover more than one training precision (`train.precision` fp32 and bf16), dispatch and
attention are fitted per precision (`dispatch_bf16`, `attention_bf16`, ...; efficiency.py says why these two),
gemm and memory shared: on a CPU a bf16 step's kernels cost far more than an fp32 step's. A precision without
runs keeps the shared factors, and a note says so.

The hardware must be the one the runs ran on: runs whose summary.json says `device = "cpu"` are refused
against a GPU entry (the default `--hardware h100-sxm` fitted CPU runs without a word), and a run whose
thread count differs from the one a `stride plan probe` entry was measured at is named in a warning, as is one whose
env.json CPU differs from the probe's. A run that did not finish or timed no step is refused; one that timed its
warm-up is named. A fitted factor on an end of its range and a calibration run the fit misses by more than 25 % are
named; missed by more than 10x, nothing is written (the hardware entry cannot describe the machine).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from stride.config.errors import ConfigError
from stride.config.schema import RunConfig
from stride.files.input_file import InputFileError, json_object, read_input_text
from stride.files.strict_json import finite_number
from stride.metrics.contention import entry_contention
from stride.perfmodel.census import WorkloadCensus
from stride.perfmodel.census_workload import workload_census
from stride.perfmodel.costmodel import Prediction
from stride.perfmodel.efficiency import PER_PRECISION, PRECISIONS, Efficiency, load_efficiency
from stride.perfmodel.fit import BOUNDS, fit_efficiency
from stride.perfmodel.hardware import Hardware, load_catalog
from stride.perfmodel.layout import Layout
from stride.perfmodel.workload_cost import predict_workload

# On a CPU the factors mean: gemm/attention of the probe's matmul peak, memory of its copy
# bandwidth, dispatch of its bare-op overhead, network of the `stride comm` profile's rate (a
# rank sharing its core with gloo and waiting on a straggler reaches less than the benchmark).
LOCAL_BOUNDS = {**BOUNDS, "gemm": (0.3, 1.0), "attention": (0.05, 1.0), "memory": (0.3, 3.0),
                "network": (0.2, 1.0)}
# A precision's own factors on a CPU: fp32's range as the shared ones; 16-bit ones reach lower. Measured on an Intel
# Xeon with AMX (one thread, torch 2.13): a kernel of a small model's bf16 step cost ~30x the probe's bare op (0.03:
# each bf16 GEMM call a fixed 0.1-0.2 ms, autocast's casts), bf16 flash attention about 0.002 of the bf16 peak
# (its backward 7-14x slower than fp32's at head dim 16-32)
OWN_BOUNDS = {"fp32": {}, "bf16": {"attention": (0.0005, 1.0), "dispatch": (0.005, 1.0)}}
OWN_BOUNDS["fp16"] = OWN_BOUNDS["bf16"]
# Runs the model cannot tell apart (the same predicted step whatever the factors) measured further apart than
# this cannot both be fitted: on a busy 2-core host one configuration's throughput read up to 22 % apart
# between rounds (benchmarks/data_loader.py, 3 rounds), so 1.5x is a disagreement, not noise. Between two
# such runs the robust (Huber) loss is flat, and the fit silently kept its starting factors (0.46 vs 0.052
# s/step for one layout).
DISAGREE = 1.5
# `stride plan probe` records its thread count only in the entry's display_name (probe.hardware_toml:
# "this machine, 1 thread(s) per process (measured)"); a hardware entry has no field for it
PROBED_THREADS = re.compile(r"(\d+) thread\(s\) per process")
# what a factor above 1 multiplies past: the fit bounds allow it (a CPU's caches beat its DRAM copy rate; a
# run can beat nccl-tests' published bus bandwidth a little), so it is reported, not clipped to 1
ABOVE_ONE = {"memory": "memory_bw_tbps (on a CPU: tensors held in cache)", "network": "bus bandwidth",
             "gemm": "peak_tflops", "dispatch": "kernel_overhead_us (per kernel)",
             "flash": "the published attention curves"}


def _figure(name: str) -> str:
    """The hardware figure factor `name` is a fraction of (a precision's own factor: as its shared one's)."""
    kind, _, prec = name.rpartition("_")
    if kind in PER_PRECISION and prec in PRECISIONS:
        return f"{ABOVE_ONE.get(kind, 'peak_tflops')} ({prec} steps)"
    return ABOVE_ONE.get(name, name)


def _low_precision(name: str, hw: Hardware) -> bool:
    """A 16-bit precision's own factor on a CPU: far below 1 is what such kernels measure (OWN_BOUNDS), not a fault."""
    kind, _, prec = name.rpartition("_")
    return hw.cpu and kind in PER_PRECISION and prec in ("bf16", "fp16")


@dataclass
class RunInputs:
    run_dir: Path
    config: RunConfig
    trace: WorkloadCensus
    layout: Layout
    global_batch: int
    measured_step_s: float
    world_size: int
    device: str | None = None  # summary.json's device type ("cpu", "cuda"); None in runs that lack it
    threads: int | None = None  # intra-op threads per process: train.threads, else env.json torch_threads
    threads_from: str = ""
    contention: str | None = None  # summary.json's contention_note: the run measured a busy host
    timing: str | None = None  # summary.json's timing_note: warm-up steps timed, not steady-state
    cpu_model: str | None = None  # env.json's cpu_model and cpu_count: the machine the run ran on
    cpu_count: int | None = None

    def predict(self, hw: Hardware, eff: Efficiency) -> Prediction:
        p = self.config.parallel
        fsdp_bytes = 2 if p.mp_param_dtype in ("bf16", "fp16") else 4
        return predict_workload(self.trace, self.layout, hw, self.global_batch, eff, p.ddp_bucket_mb, fsdp_bytes)


RUN_FILE_MAX_BYTES = 64 << 20  # summary.json, rank0.json, env.json: KiBs


def _read_json(path: Path, run_dir: Path) -> dict:
    """A run file's JSON object; a ConfigError naming the file where it is not a regular file (a FIFO or /dev/zero
    is never read), too large, not UTF-8, not JSON (nested past Python's recursion limit too) or not an object."""
    try:
        return json_object(read_input_text(path, limit=RUN_FILE_MAX_BYTES, what="run file"), path)
    except InputFileError as exc:
        raise ConfigError(str(exc)) from None


def run_file_problem(summary: dict, rank0: dict | None = None, env: dict | None = None) -> str | None:
    """The first field calibration reads from a run's files that is not what stride writes there (None: none), as
    `file: key = value is not ...`: summary.json's world_size (a process count), step_time_s and samples_per_s
    (finite numbers >= 0), step_time_breakdown_s (a table of finite numbers >= 0) and device (text); rank0.json's
    median_step_time_s; env.json's torch_threads. `stride report` refuses such a file; calibrate raised a TypeError
    or AttributeError from the arithmetic (audit 14, L2)."""
    checks = [("summary.json", summary, "world_size", lambda v: type(v) is int and v >= 1, "a process count >= 1"),
              *(("summary.json", summary, k, lambda v: finite_number(v) and v >= 0, "a finite number >= 0")
                for k in ("step_time_s", "samples_per_s")),
              ("summary.json", summary, "step_time_breakdown_s",
               lambda v: isinstance(v, dict) and all(finite_number(x) and x >= 0 for x in v.values()),
               "a table of finite numbers >= 0 (seconds a step, by phase)"),
              ("summary.json", summary, "device", lambda v: isinstance(v, str), "text"),
              ("rank0.json", rank0 or {}, "median_step_time_s", lambda v: finite_number(v) and v >= 0,
               "a finite number >= 0"),
              ("env.json", env or {}, "torch_threads", lambda v: type(v) is int and v >= 1, "a thread count >= 1")]
    for name, obj, key, ok, what in checks:
        v = obj.get(key)
        if v is not None and not ok(v):
            return f"{name}: {key} = {json.dumps(v)[:60]} is not {what}"
    return None


def run_inputs(run_dir: Path) -> RunInputs:
    """Config, trace, layout and measured step time of one run directory."""
    from stride.config import load_config

    if not os.path.lexists(run_dir):  # "missing summary.json" read as a damaged run, not a mistyped path
        raise ConfigError(f"{run_dir}: no such run directory")
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: not a directory (a run directory holds config.toml and summary.json)")
    summ_p, cfg_p = run_dir / "summary.json", run_dir / "config.toml"
    for p in (summ_p, cfg_p):
        if not os.path.lexists(p):
            raise ConfigError(f"{run_dir}: missing {p.name}")
    summary = _read_json(summ_p, run_dir)
    rank0 = run_dir / "rank0.json"
    rank0_obj = _read_json(rank0, run_dir) if os.path.lexists(rank0) else None
    env_p = run_dir / "env.json"
    env = _read_json(env_p, run_dir) if os.path.lexists(env_p) else {}
    if why := run_file_problem(summary, rank0_obj, env):  # before the config is read or the model censused
        raise ConfigError(f"{run_dir}/{why}: edited or damaged")
    if why := unfinished(summary):
        raise ConfigError(f"{run_dir}: {why}: its step time measures no training step; leave it out or rerun it")
    cfg = load_config(cfg_p)
    t, par = cfg.train, cfg.parallel
    world = int(summary.get("world_size") or 1)
    if par.tp > 1 or par.pp > 1:
        raise ConfigError(f"{run_dir}: tp/pp runs are not modelled for traced workloads")
    if world % max(1, par.dp_shard):
        raise ConfigError(f"{run_dir}: world size {world} is not a multiple of dp_shard {par.dp_shard}")
    if t.batch_size % (world * t.grad_accum):
        raise ConfigError(f"{run_dir}: batch {t.batch_size} does not split over {world} ranks x {t.grad_accum}")
    micro = t.batch_size // (world * t.grad_accum)
    zero = 0 if par.dp_shard <= 1 else (3 if par.reshard_after_forward else 2)
    if t.activation_checkpointing not in ("none", "full"):
        raise ConfigError(f"{run_dir}: activation_checkpointing {t.activation_checkpointing!r} is not modelled")
    trace = workload_census(cfg, micro, run_dir.name)
    layout = Layout(dp=world, zero=zero, micro_batch=micro, recompute=t.activation_checkpointing,
                    precision=trace.precision)
    step = None
    if rank0_obj is not None:
        step = rank0_obj.get("median_step_time_s")
    if not step and summary.get("step_time_s"):
        # a checkpoint stall counts in the trainer's step time (stride.metrics.step_timer.StepTimer.add); the
        # model predicts the training step alone, so the stall is taken out
        parts = summary.get("step_time_breakdown_s") or {}
        stall = parts.get("checkpoint") or 0.0
        nums = [v for v in parts.values() if isinstance(v, int | float)]
        # only where the parts sum to the step time: a run recorded before stalls counted in it kept them apart
        counted = abs(sum(nums) - summary["step_time_s"]) <= 0.01 * summary["step_time_s"]
        step = summary["step_time_s"] - (stall if isinstance(stall, int | float) and counted else 0.0)
    if not step and summary.get("samples_per_s"):
        step = t.batch_size / summary["samples_per_s"]
    if not step or step <= 0:
        raise ConfigError(f"{run_dir}: no measured step time (rank0.json median_step_time_s, or "
                          "summary.json step_time_s / samples_per_s)")
    threads, threads_from = ((t.threads, "config.toml train.threads") if t.threads else
                             (env.get("torch_threads"), "env.json torch_threads"))
    device = str(summary["device"]).split(":")[0] if summary.get("device") else None
    timing = summary.get("timing_note")
    model, count = env.get("cpu_model"), env.get("cpu_count")
    return RunInputs(run_dir, cfg, trace, layout, t.batch_size, float(step), world, device,
                     int(threads) if threads else None, threads_from, entry_contention(summary),
                     timing if isinstance(timing, str) and timing else None,
                     model if isinstance(model, str) and model else None,
                     count if type(count) is int and count >= 1 else None)


def unfinished(summary: dict) -> str | None:
    """Why a run's summary says it trained no step to time (None: it did): a status other than finished (a
    divergence stops a run, but its steps were timed), or no step (timed). Such a run was fitted without a word
    (status failed, steps 0, its step_time_s read as measured)."""
    status = summary.get("status")
    if status is not None and status not in ("finished", "diverged"):
        return f"summary.json status = {json.dumps(status)[:40]} (the run did not finish)"
    for key in ("steps", "timed_steps"):
        if summary.get(key) == 0:
            return f"summary.json {key} = 0"
    return None


def timing_warnings(runs: list[RunInputs]) -> list[str]:
    """Runs whose summary says their step time includes the warm-up (train.steps not above metrics.skip_steps): a
    first step's allocation and autotuning counted as training, so factors fitted to them are too low; named, as
    contended runs are (contention_warnings)."""
    return [f"{r.run_dir} is not steady-state ({r.timing}): factors fitted to it count the warm-up; rerun it with "
            "more steps before writing them to an efficiency file" for r in runs if r.timing]


def machine_warnings(runs: list[RunInputs], hw: Hardware) -> tuple[list[str], list[str]]:
    """(warnings, notes): runs whose env.json names another CPU model or core count than the one `hw` was probed
    on (`probed_cpu_model`, `probed_cpu_count`): the probe's peaks and bandwidth are not that machine's, and runs
    from elsewhere were fitted without a word. A probe entry from before the probe recorded its CPU: one note."""
    if not hw.cpu or not hw.probed_threads:
        return [], []
    if not hw.probed_cpu_model:
        return [], [f"hardware `{hw.name}` does not record the CPU it was probed on (a probe file from an older "
                    "stride): whether the runs ran on that machine is not checked; probe again to have it checked"]
    out = []
    for r in runs:
        if r.cpu_model and r.cpu_model != hw.probed_cpu_model:
            out.append(f"{r.run_dir} ran on CPU {r.cpu_model!r} (env.json cpu_model) but hardware `{hw.name}` was "
                       f"probed on CPU {hw.probed_cpu_model!r}: its figures are not that machine's; calibrate runs of "
                       "the probed machine, or probe the one the runs ran on")
        elif r.cpu_count and hw.probed_cpu_count and r.cpu_count != hw.probed_cpu_count:
            out.append(f"{r.run_dir} ran on a host of {r.cpu_count} CPUs (env.json cpu_count) but hardware "
                       f"`{hw.name}` was probed on one of {hw.probed_cpu_count}: another machine, or another size of "
                       "it; calibrate runs of the probed machine, or probe the one the runs ran on")
    return out, []


def contention_warnings(runs: list[RunInputs]) -> list[str]:
    """Runs whose own summary says the host was busy while they ran: their step times measure the load as much as the
    hardware, so factors fitted to them are not the hardware's (first-contact audit of 2026-12-06: the general "check
    that the host was not busy" went out while each run's summary said it was)."""
    return [f"{r.run_dir} was measured on a busy host ({r.contention}): factors fitted to it describe that load, "
            "not the hardware; rerun it on a quiet host before writing them to an efficiency file"
            for r in runs if r.contention]


def check_hardware(runs: list[RunInputs], hw: Hardware) -> None:
    """Refuse runs of mixed devices, or of another kind of device than `hw`: factors fitted to a CPU run
    against a GPU's peaks (or the reverse) describe neither."""
    kinds = {r.device for r in runs if r.device}
    if len(kinds) > 1:
        named = ", ".join(f"{r.run_dir} ({r.device})" for r in runs if r.device)
        raise ConfigError(f"runs of different devices cannot be calibrated together: {named}; calibrate each "
                          "device's runs on their own")
    if kinds == {"cpu"} and not hw.cpu:
        raise ConfigError(f"{runs[0].run_dir}: ran on cpu (summary.json device) but --hardware {hw.name} is not a "
                          "CPU entry; measure this machine with `stride plan probe --out local.toml` and pass "
                          "--hardware local-cpu --hardware-file local.toml")
    if kinds and kinds != {"cpu"} and hw.cpu:
        raise ConfigError(f"{runs[0].run_dir}: ran on {kinds.pop()} (summary.json device) but --hardware {hw.name} "
                          "is a CPU entry; pass --hardware with the part the runs ran on")


def thread_warnings(runs: list[RunInputs], hw: Hardware) -> list[str]:
    """Runs at another thread count than `hw` was probed at: the probe's peaks and bandwidth are per that
    count, so the fit absorbs the difference into the factors (a 2-thread run against a 1-thread probe fitted
    memory 2.15, and the 1-thread-per-rank runs came out 52 % too fast)."""
    m = PROBED_THREADS.search(hw.display_name)  # an entry a probe wrote before `probed_threads` existed
    probed = hw.probed_threads or (int(m.group(1)) if m else None)
    return [f"{r.run_dir} ran {r.threads} thread(s) per process ({r.threads_from}) but hardware `{hw.name}` was "
            f"probed with {probed}: rerun it with --set train.threads={probed}, or probe with --threads {r.threads}"
            for r in runs if probed and r.threads and r.threads != probed]


# a fitted factor under this puts the runs 10x or more below the hardware's measured figure: a busy host, more
# threads than cores, or work the model does not see, rather than an efficiency (an outside audit: dispatch 0.074,
# 13 us a kernel against the probe's 0.99 us, went by without a word)
FAR_BELOW = 0.1


def factor_warnings(eff: Efficiency, fitted: tuple[str, ...], hw: Hardware) -> list[str]:
    """Fitted factors above 1: the runs went faster than `hw`'s own figure allows, which its bounds permit
    (ABOVE_ONE) but which also is what runs on other hardware, or at more threads, look like. Factors under
    FAR_BELOW: the runs went 10x slower than it."""
    above = [f"fitted {name} = {getattr(eff, name):g} is above 1: the runs beat hardware `{hw.name}`'s "
             f"{_figure(name)}; check that the runs ran on it, at the threads it was measured with"
             for name in fitted if getattr(eff, name) > 1]
    below = [f"fitted {name} = {getattr(eff, name):g}: the runs went {1 / getattr(eff, name):.0f}x slower than "
             f"hardware `{hw.name}`'s {_figure(name)}; check that the host was not busy and the runs "
             "used the threads it was probed with, or that the model sees their work"
             for name in fitted if 0 < getattr(eff, name) < FAR_BELOW and not _low_precision(name, hw)]
    return above + below


def bound_warnings(eff: Efficiency, fitted: tuple[str, ...], hw: Hardware) -> list[str]:
    """Fitted factors on an end of their fit range (`_bounds`): the runs wanted a value past it, so the fit stopped
    short and misses them; the factor is the bound, not a measurement (network 0.2, gemm 0.3 and memory 0.3 went by
    without a word, one FSDP run then predicted 53 % fast)."""
    bounds, out = _bounds(hw), []
    for name in fitted:
        v = getattr(eff, name)
        lo, hi = bounds[name]
        end = ("lower", lo) if v is not None and v <= lo * (1 + 1e-3) else (
            ("upper", hi) if v is not None and v >= hi * (1 - 1e-3) else None)
        if end:
            out.append(f"fitted {name} = {v:g} sits on its {end[0]} bound ({end[1]:g}): the runs wanted a value past "
                       "it, so it is the bound, not a measurement, and the runs it reads may be missed; check "
                       f"hardware `{hw.name}`'s {_figure(name)} against the machine the runs ran on")
    return out


# a calibration run the fitted factors miss by more than this fraction is named; by more than MISS_REFUSE times (too
# slow or too fast) the hardware entry cannot describe the machine, and nothing is written (peak_tflops 1e-9 fitted
# its runs at +1e9 % and printed the factors)
MISS_WARN = 0.25
MISS_REFUSE = 10.0


def miss_warnings(rep: list[dict]) -> tuple[list[str], list[str]]:
    """(warnings, refusals): calibration runs the fit misses by more than MISS_WARN, and by more than MISS_REFUSE
    times, each with its error."""
    warn, refuse = [], []
    for r in rep:
        ratio = r["predicted_step_s"] / r["measured_step_s"]
        said = (f"{r['run']} ({r['err_pct']:+.3g} %: predicted {r['predicted_step_s']:.3g} s/step, measured "
                f"{r['measured_step_s']:.3g})")
        if not 1 / MISS_REFUSE <= ratio <= MISS_REFUSE:
            refuse.append(said)
        elif abs(ratio - 1) > MISS_WARN:
            warn.append(f"the fitted factors miss calibration run {said}, past {MISS_WARN:.0%}: the model does not "
                        "describe that run with these factors; predictions like it will be as far off")
    return warn, refuse


# below these a CPU entry's figure is no CPU's (a probe of one slow core measured 0.1 TFLOP/s fp64, 14 GB/s copies)
CPU_FLOOR = {"memory_bw_tbps": 1e-3, "peak_tflops": 1e-3}


def cpu_range_warnings(hw: Hardware) -> list[str]:
    """A CPU entry's bandwidth or peaks above every CPU of the catalog, or below CPU_FLOOR: a typo or a unit slip
    (memory_bw_tbps = 900 fitted without a word), which the factors then absorb."""
    if not hw.cpu:
        return []
    cpus = [h for h in load_catalog().devices.values() if h.cpu]
    top_bw = max(cpus, key=lambda h: h.memory_bw_tbps)
    figures = [("memory_bw_tbps", hw.memory_bw_tbps, top_bw.memory_bw_tbps, top_bw.name, "TB/s")]
    for dtype, v in sorted(hw.peak_tflops.items()):
        have = [h for h in cpus if dtype in h.peak_tflops]
        if have:
            top = max(have, key=lambda h: h.peak_tflops[dtype])
            figures.append((f"peak_tflops.{dtype}", v, top.peak_tflops[dtype], top.name, "TFLOP/s"))
    out = []
    for field, v, most, part, unit in figures:
        floor = CPU_FLOOR[field.partition(".")[0]]
        if v > most:
            out.append(f"hardware `{hw.name}`'s {field} = {v:g} {unit} is above every CPU in the catalog (`{part}`: "
                       f"{most:g}): a typo or a unit slip? the factors fitted against it are not this machine's")
        elif v < floor:
            out.append(f"hardware `{hw.name}`'s {field} = {v:g} {unit} is below any CPU's ({floor:g}): a typo or a "
                       "unit slip? the factors fitted against it are not this machine's")
    return out


def underdetermined_warnings(runs: list[RunInputs], hw: Hardware, factors: tuple[str, ...] | None = None,
                             start: Efficiency | None = None) -> list[str]:
    """Fit stages with fewer runs than factors: such a fit meets its runs almost exactly (one run, four factors
    reported an error of 0.00005 % and no word), so how well it meets its runs says nothing and the factors are one of
    many sets that fit, not measurements. Runs the model cannot tell apart (`_same_step`) count once."""
    out = []
    for rs, names in stages(runs, factors, start):
        distinct = len({_same_step(r, hw) for r in rs})
        if distinct < len(names):
            same = f" ({distinct} distinct to the model)" if distinct != len(rs) else ""
            out.append(f"{len(rs)} run(s){same} fit {len(names)} factor(s) ({', '.join(names)}): the fit is "
                       "underdetermined, so how well it meets these runs says nothing of other runs and the "
                       f"fitted factors are not measurements; calibrate on at least {len(names)} runs of different "
                       "shapes (batch size, model size, sequence length)")
    return out


def precisions(runs: list[RunInputs]) -> list[str]:
    """The training precisions the runs cover, in PRECISIONS order."""
    have = {r.trace.precision for r in runs}
    return [p for p in PRECISIONS if p in have]


def _has_attention(runs: list[RunInputs]) -> bool:
    return any(la.fwd.attn_flops for r in runs for la in r.trace.layers)


def _own(runs: list[RunInputs], start: Efficiency | None) -> bool:
    """Whether dispatch and attention are fitted per precision: the runs cover several, or `start` has its own
    factors for the one they cover (the shared factor would move nothing those runs read)."""
    precs = precisions(runs)
    return len(precs) > 1 or bool(start and set(precs) & set(start.own_precisions()))


def stages(runs: list[RunInputs], factors: tuple[str, ...] | None = None,
           start: Efficiency | None = None) -> list[tuple[list[RunInputs], tuple[str, ...]]]:
    """(runs, factors) of each fit stage: compute factors on single-process runs, then network on the rest;
    `factors` fits those on every run in one stage. Single-process runs of several precisions fit dispatch and
    attention per precision (`dispatch_bf16`: read by the bf16 runs alone), gemm and memory shared."""
    if factors is not None:
        return [(runs, factors)]
    single = [r for r in runs if r.world_size == 1] or runs
    multi = [r for r in runs if r.world_size > 1]
    if _own(single, start):
        by = {p: [r for r in single if r.trace.precision == p] for p in precisions(single)}
        compute = ("gemm", "memory", *(f"dispatch_{p}" for p in by),
                   *(f"attention_{p}" for p, rs in by.items() if _has_attention(rs)))
    else:
        compute = ("gemm", "memory", "dispatch") + (("attention",) if _has_attention(single) else ())
    return [(single, compute)] + ([(multi, ("network",))] if multi else [])


def _bounds(hw: Hardware) -> dict[str, tuple[float, float]]:
    """Fit ranges by factor name, a precision's own factors included."""
    shared = LOCAL_BOUNDS if hw.cpu else BOUNDS
    own = {f"{k}_{p}": (OWN_BOUNDS[p].get(k, shared[k]) if hw.cpu else shared[k])
           for k in PER_PRECISION for p in PRECISIONS}
    return {**shared, **own}


def _seeded(eff: Efficiency, names: tuple[str, ...]) -> Efficiency:
    """`eff` with each unset precision factor among `names` started at its shared factor."""
    seeds = {n: getattr(eff, n.rpartition("_")[0]) for n in names if getattr(eff, n) is None}
    return dataclasses.replace(eff, **seeds) if seeds else eff


def precision_notes(runs: list[RunInputs], eff: Efficiency, hw: Hardware, start: Efficiency | None = None) -> list[str]:
    """What the steps of each training precision are predicted with after this calibration, where that is not
    their own fitted factors: a precision the runs do not cover keeps the shared factors, and says so (bf16
    steps predicted with factors fitted on fp32 runs came out a median 47 % too fast on an Intel Xeon with AMX). And
    a 16-bit precision's own factors far below 1 on a CPU, which are measurements (OWN_BOUNDS), not faults."""
    single = [r for r in runs if r.world_size == 1] or runs
    precs = precisions(single)
    fitted = {n for _, names in stages(runs, start=start) for n in names}
    source = "the starting factors" if start else "the default priors"
    out = []
    by_shared: dict[tuple[tuple[str, ...], bool], list[str]] = {}
    for p in PRECISIONS:
        shared = tuple(k for k in PER_PRECISION if getattr(eff, f"{k}_{p}") is None)
        if shared and not (p in precs and not _own(single, start)):  # a one-precision fit's own runs: theirs
            by_shared.setdefault((shared, p in precs), []).append(p)
    for (shared, covered), ps in by_shared.items():
        values = ", ".join(f"{k} = {getattr(eff, k):g} ("
                           + (f"fitted on the {precs[0]} runs" if k in fitted else f"not fitted: {source}") + ")"
                           for k in shared)
        why = "no run of theirs has attention" if covered else "they have no run of their own"
        out.append(f"{' and '.join(ps)} steps will be predicted with the shared {values}, as {why}; a precision's "
                   "kernels can cost very differently (on a CPU a bf16 step's kernel cost ~30x an fp32 step's, its "
                   "flash-attention backward 7-14x), so calibrate on runs of that precision too to fit its own "
                   f"({', '.join(f'{k}_{ps[0]}' for k in shared)})")
    for name in sorted(fitted):
        v, prec = getattr(eff, name), name.rpartition("_")[2]
        if _low_precision(name, hw) and v < FAR_BELOW:
            what = (f"a kernel of the {prec} runs cost {1 / v:.0f}x hardware `{hw.name}`'s kernel_overhead_us (each "
                    f"{prec} GEMM call's fixed cost, autocast's casts)" if name.startswith("dispatch") else
                    f"the {prec} runs' attention ran at {v:.2%} of hardware `{hw.name}`'s {prec} peak (torch's "
                    f"{prec} flash-attention backward)")
            out.append(f"fitted {name} = {v:g}: {what}; a CPU's 16-bit kernels measure so at a small model's shapes, "
                       "so it is no fault of the runs")
    return out


def calibrate(runs: list[RunInputs], hw: Hardware, start: Efficiency | None = None,
              factors: tuple[str, ...] | None = None) -> tuple[Efficiency, list[dict]]:
    """Fit factors on `runs` (squared log error of step time); report each run's error after.

    In two stages, so each factor is fitted where it shows: the compute factors (gemm, memory,
    dispatch, and attention when a model has it) on single-process runs, then the network factor on
    the multi-process runs with compute held fixed. `factors` fits those in one stage instead."""
    bounds = _bounds(hw)

    def samples(rs: list[RunInputs]) -> list:
        return [((lambda e, r=r: 1.0 / r.predict(hw, e).step_time_s), 1.0 / r.measured_step_s) for r in rs]

    eff = start or Efficiency()
    for rs, names in stages(runs, factors, start):
        eff = fit_efficiency(samples(rs), names, _seeded(eff, names), sweeps=8, bounds=bounds)
    return eff, [report(r, hw, eff) for r in runs]


def _same_step(r: RunInputs, hw: Hardware, eff: Efficiency | None = None) -> tuple:
    """What the model sees of a run: its world size and its predicted step under two unrelated sets of factors
    (equal keys: runs no factors can tell apart)."""
    other = Efficiency(gemm=0.7, attention=0.35, memory=0.6, network=0.8, overlap=0.5, dispatch=0.15)
    return (r.world_size, *(f"{r.predict(hw, e).step_time_s:.9e}" for e in (eff or Efficiency(), other)))


def disagreements(runs: list[RunInputs], hw: Hardware, eff: Efficiency) -> list[str]:
    """Groups of runs that are one step to the model (equal predictions under two unrelated sets of
    factors) whose measured step times are more than DISAGREE apart: one line each, naming the runs."""
    groups: dict[tuple, list[RunInputs]] = {}
    for r in runs:
        groups.setdefault(_same_step(r, hw, eff), []).append(r)
    out = []
    for group in groups.values():
        group = sorted(group, key=lambda r: r.measured_step_s)
        spread = group[-1].measured_step_s / group[0].measured_step_s
        if len(group) > 1 and spread > DISAGREE:
            named = ", ".join(f"{r.run_dir} ({r.measured_step_s:.3g} s/step)" for r in group)
            out.append(f"runs {named} are the same step to the model (layout {group[0].layout.short()}) but were "
                       f"measured {spread:.1f}x apart: no factors fit both; rerun them on a quiet machine or leave "
                       "the outlier out")
    return out


def report(r: RunInputs, hw: Hardware, eff: Efficiency) -> dict:
    pred = r.predict(hw, eff)
    return {"run": str(r.run_dir), "layout": pred.layout.short(), "precision": r.trace.precision,
            "world_size": r.world_size,
            "measured_step_s": r.measured_step_s, "predicted_step_s": pred.step_time_s,
            "err_pct": (pred.step_time_s / r.measured_step_s - 1) * 100,
            "breakdown_s": pred.breakdown_s}


def calibrate_cli(args: argparse.Namespace) -> int:
    if not args.runs:
        raise ConfigError("stride plan calibrate needs one or more run directories")
    hw = load_catalog(args.hardware_file).get(args.hardware)
    start = load_efficiency(args.efficiency, note="stride plan calibrate") if args.efficiency else None
    runs = [run_inputs(Path(r)) for r in args.runs]
    check_hardware(runs, hw)
    machine, machine_notes = machine_warnings(runs, hw)
    disagree = disagreements(runs, hw, start or Efficiency())
    eff, rep = calibrate(runs, hw, start)
    base = start or Efficiency()
    # a precision's own factor starts at its shared one (_seeded): unmoved from there is kept
    kept = all(abs(v - (getattr(base, k) if getattr(base, k) is not None else getattr(base, k.rpartition("_")[0])))
               <= 1e-4 for k, v in eff.to_dict().items())
    if disagree and kept:
        disagree.append("the fit moved no factor: " + (f"the factors of {args.efficiency}" if start else
                                                       "the default factors") + " were kept, not fitted")
    # factors the fit kept are already said not to be fitted; factors it moved on too few runs are said here
    under = [] if disagree and kept else underdetermined_warnings(runs, hw, start=start)
    fitted = tuple(n for _, names in stages(runs, start=start) for n in names)
    missed, refused = miss_warnings(rep)
    warnings = [*cpu_range_warnings(hw), *machine, *contention_warnings(runs), *timing_warnings(runs),
                *thread_warnings(runs, hw), *disagree, *under, *factor_warnings(eff, fitted, hw),
                *bound_warnings(eff, fitted, hw), *missed]
    for w in warnings:
        print(f"stride plan calibrate: warning: {w}", file=sys.stderr)
    if refused:
        raise ConfigError(f"the fitted factors miss their own calibration runs by more than {MISS_REFUSE:g}x: "
                          f"{'; '.join(refused)}; hardware `{hw.name}` cannot describe the machine these runs ran "
                          "on (check its peak_tflops, memory_bw_tbps and kernel_overhead_us, or probe it again with "
                          "`stride plan probe`); no factors written")
    notes = [*machine_notes, *precision_notes(runs, eff, hw, start)]
    for n in notes:
        print(f"stride plan calibrate: note: {n}", file=sys.stderr)
    print(json.dumps({"hardware": hw.name, "efficiency": eff.to_dict(), "runs": rep, "warnings": warnings,
                      "notes": notes}))
    return 0
