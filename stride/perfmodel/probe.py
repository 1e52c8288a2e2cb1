"""Measure this machine as the catalog describes a device: matmul peak, copy bandwidth, per-kernel
host overhead, at a given thread count; write a hardware TOML entry the planner reads.

`stride plan probe --out local.toml [--threads 1] [--comm-profile gloo2.toml]` -> an entry
`[hardware.local-cpu]` (base epyc-9654 for the fields a probe cannot see) that replaces the
datasheet values with measured ones. The matmul figure is the best of a 1024^3 fp32/bf16 matmul
(stride.metrics.peak); copy bandwidth is read + write bytes of a 64 MiB copy; kernel overhead is
the median time of a tiny elementwise op (the cost every eager kernel pays before any work).
Memory is the host's RAM (physical pages x page size, or /proc/meminfo MemTotal), capped by the
cgroup's limit when the process runs under one: the base part's 768 GiB let a plan "fit" 71 GiB a
rank on a 23 GiB machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from stride.metrics.env import cpu_model
from stride.metrics.peak import measured_matmul_peak


def copy_bandwidth(nbytes: int = 64 * 2**20, repeats: int = 10) -> float:
    """Best read + write bytes/s of a large tensor copy."""
    a = torch.empty(nbytes // 4, dtype=torch.float32).fill_(1.0)
    b = torch.empty_like(a)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        b.copy_(a)
        best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best


def kernel_overhead_s(repeats: int = 2000) -> float:
    """Median seconds of `x + y` on 8-element tensors: dispatch and allocation, no work."""
    x, y = torch.ones(8), torch.ones(8)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        for _ in range(repeats // 20):
            x + y
        times.append((time.perf_counter() - t0) / (repeats // 20))
    return statistics.median(times)


def fsdp_unit_overhead_s(layers: int = 4, steps: int = 25) -> float:
    """Host seconds FSDP2 adds per unit per training step, without communication.

    A small transformer (stride's TimeSeriesTransformer, `layers` blocks + root = layers + 1
    units) trains on a fake 2-rank process group (torch's FakeStore: collectives return at
    once), with and without `fully_shard`, with stride's own DTensor-aware grad clipping and fused
    AdamW; the median step difference over the units is FSDP2's hooks, DTensor bookkeeping,
    copy-in/out and sharded optimizer dispatch. On a CPU it adds to the step; measured here
    1.1-2.2 ms per unit (a busy 2-core machine)."""

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from stride.models.transformer import TimeSeriesTransformer
    from stride.parallel.context import clip_grad_norm

    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    mesh = init_device_mesh("cpu", (2,))

    def step_time(shard: bool) -> float:
        torch.manual_seed(0)
        model = TimeSeriesTransformer(7, 16, 3, n_layers=layers)
        if shard:
            for blk in model.blocks:
                fully_shard(blk, mesh=mesh)
            fully_shard(model, mesh=mesh, reshard_after_forward=False)
        params = list(model.parameters())
        opt = torch.optim.AdamW(params, fused=True)
        x = torch.randn(4, 16, 7)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            model(x).square().mean().backward()
            clip_grad_norm(params, 1.0, torch.device("cpu"))  # the trainer's DTensor-aware clipping
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
        return statistics.median(times[5:])

    plain, sharded = step_time(False), step_time(True)
    return max(0.0, (sharded - plain) / (layers + 1))


_TRAIN_LOOP = """
import os, statistics, sys, time, torch
from stride.perfmodel.local_runs import pin_core
pin_core(int(sys.argv[1])); torch.set_num_threads(1); torch.manual_seed(0)
from stride.models.transformer import TimeSeriesTransformer
m = TimeSeriesTransformer(7, 64, 3); opt = torch.optim.AdamW(m.parameters(), fused=True)
x = torch.randn(32, 64, 7); ts = []
while time.time() < float(sys.argv[3]): time.sleep(0.001)  # start together
for i in range(int(sys.argv[2])):
    t0 = time.perf_counter(); m(x).square().mean().backward(); opt.step(); opt.zero_grad()
    ts.append(time.perf_counter() - t0)
print(statistics.median(ts[3:]))
"""


def contention_slowdown(nproc: int = 2, steps: int = 30) -> float:
    """Per-process step time of a small training loop with `nproc` pinned one-thread processes
    running at once, over the same loop alone: what ranks sharing a host's memory system and
    caches cost each other, and, on a shared machine, what its other jobs take once every core
    runs a rank (one rank alone has a core the scheduler keeps free). Measured here in a niced
    session at load 10-20 on 2 cores: 1.8-2.4; it moves with the machine's load."""
    import subprocess
    import sys

    from stride.perfmodel.local_runs import nice_session

    def run(n: int) -> list[float]:
        start = str(time.time() + 4.0)  # after every process has imported torch
        procs = [subprocess.Popen([sys.executable, "-c", _TRAIN_LOOP, str(i), str(steps), start],
                                  stdout=subprocess.PIPE, text=True, preexec_fn=nice_session) for i in range(n)]
        return [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]

    ratios = []
    for _ in range(3):  # alternate, median of the ratios: a shared machine's load moves
        alone = run(1)[0]
        ratios.append(statistics.mean(run(nproc)) / alone)
    return max(1.0, statistics.median(ratios))


def _cgroup_limit_bytes() -> int | None:
    """The memory limit of this process's cgroup (v2 memory.max, v1 memory.limit_in_bytes), or None."""
    for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(f).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < 2**60:  # "max" or v1's 2^63-ish sentinel: no limit
            return int(text)
    return None


def host_memory_gib() -> float:
    """GiB of RAM this host gives a process: physical pages x page size (else /proc/meminfo MemTotal), or
    the cgroup's memory limit where that is lower (a container sees the host's RAM in both)."""
    total: int | None = None
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        if pages > 0 and size > 0:
            total = pages * size
    except (AttributeError, ValueError, OSError):
        pass
    if total is None:
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024  # kB
                    break
        except (OSError, ValueError, IndexError):
            pass
    if total is None:
        raise RuntimeError("cannot read this host's memory (os.sysconf SC_PHYS_PAGES, /proc/meminfo)")
    limit = _cgroup_limit_bytes()
    return min(total, limit) / 2**30 if limit else total / 2**30


def probe(threads: int | None = None) -> dict:
    """Measure at `threads` threads in this process (pinned to one core when 1 thread, after the
    contention check, whose processes must spread over the cores)."""
    contention = contention_slowdown(min(2, os.cpu_count() or 1)) if threads == 1 else 1.0
    if threads:
        torch.set_num_threads(threads)
        if threads == 1:
            from stride.perfmodel.local_runs import pin_core

            pin_core(0)
    cpu = torch.device("cpu")
    return {
        "fp64_tflops": measured_matmul_peak(cpu, torch.float64) / 1e12,
        "fp32_tflops": measured_matmul_peak(cpu, torch.float32) / 1e12,
        "bf16_tflops": measured_matmul_peak(cpu, torch.bfloat16) / 1e12,
        "memory_bw_tbps": copy_bandwidth() / 1e12,
        "kernel_overhead_us": kernel_overhead_s() * 1e6,
        "fsdp_unit_overhead_us": fsdp_unit_overhead_s() * 1e6,
        "contention_slowdown": contention,
        "threads": torch.get_num_threads(),
        "memory_gib": host_memory_gib(),
        # as env.json records them: calibrate compares each run's to these (runs from another machine)
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count() or 1,
    }


def hardware_toml(name: str, m: dict, comm_profile: str | None = None, cores: int | None = None) -> str:
    # memory measured (host_memory_gib) replaces the base part's 768 GiB; without it, the base's stays, assumed
    measured_mem = m.get("memory_gib")
    assumed = [*([] if measured_mem else ["memory_gib"]), "scaleup_bw_gbps", "scaleup_latency_us",
               "scaleout_latency_us", "price_per_hour_usd"]
    lines = [
        f"# measured by `stride plan probe` ({int(m['threads'])} thread(s)): replace the datasheet values",
        f"[hardware.{name}]",
        'base = "epyc-9654"',
        f'display_name = "this machine, {int(m["threads"])} thread(s) per process (measured)"',
        # every dtype the base part lists is measured here: a merged table would otherwise keep the 96-core
        # datasheet's fp64 (3.7 TFLOP/s) beside this machine's measured fp32 and bf16
        "peak_tflops = { " + ", ".join(f"{d} = {m[f'{d}_tflops']:.6g}" for d in ("fp64", "fp32", "bf16")
                                        if f"{d}_tflops" in m) + " }",
        *([f"memory_gib = {measured_mem:.4g}  # this host's RAM (all its ranks share it)"] if measured_mem else []),
        f"memory_bw_tbps = {m['memory_bw_tbps']:.6g}",
        f"kernel_overhead_us = {m['kernel_overhead_us']:.4g}",
        f"fsdp_unit_overhead_us = {m['fsdp_unit_overhead_us']:.4g}",
        f"contention_slowdown = {m['contention_slowdown']:.4g}",
        "cpu = true",
        f"probed_threads = {int(m['threads'])}",
        *([f"probed_cpu_model = {json.dumps(str(m['cpu_model']))}"] if m.get("cpu_model") else []),
        *([f"probed_cpu_count = {int(m['cpu_count'])}"] if m.get("cpu_count") else []),
        f"scaleup_domain = {cores or os.cpu_count() or 1}",
        "assumed = [" + ", ".join(f'"{a}"' for a in assumed) + "]",
    ]
    if comm_profile:
        lines.append(f'comm_profile = "{Path(comm_profile).resolve()}"')
    return "\n".join(lines) + "\n"


def probe_niced(threads: int = 1) -> dict:
    """`probe` in a child process pinned to one core (one thread) in a niced session of its own, as
    stride.perfmodel.local_runs measures training runs, so both see the machine alike."""
    import sys

    from stride.perfmodel.local_runs import run_niced

    code = ("import json, sys; from stride.perfmodel.probe import probe; "
            "print(json.dumps(probe(int(sys.argv[1]))))")
    proc = run_niced([sys.executable, "-c", code, str(threads)], {**os.environ, "OMP_NUM_THREADS": str(threads)}, 300)
    if proc.returncode:
        raise RuntimeError(f"probe failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def probe_cli(args: argparse.Namespace) -> int:
    if args.comm_profile:  # read as the planner will, before minutes of probing: a bad profile fails here
        from stride.perfmodel.hardware import read_comm_profile

        read_comm_profile(Path(args.comm_profile), "stride plan probe --comm-profile")
    m = probe_niced(args.threads or 1)
    text = hardware_toml(args.name or "local-cpu", m, args.comm_profile)
    if args.out:
        Path(args.out).write_text(text)
    print(json.dumps(m) if args.json else text)
    return 0
