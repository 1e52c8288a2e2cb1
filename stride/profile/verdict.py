"""A verdict per step (data-, host-, communication-, memory-, launch- or compute-bound) with recommendations.

The rules read the summarized figures of `breakdown.summarize` and the tiny-kernel figures of
`kernels.tiny_kernels` in a fixed order; each rule's threshold is stated next to it, so a verdict can
be traced to its figures. A busy device is not compute-bound when its time goes to many tiny kernels
(a GRU step of 2,290 `add_` kernels of 4 µs each, at 3-20 % MFU): their fixed cost sets the pace, and
fusion, compile or CUDA graphs help where a faster matmul dtype does not. Lower precision is advised
only where it measured faster (`stride.metrics.dtype_speed.precision_line`).
"""

from __future__ import annotations

IDLE_BOUND_PCT = 30.0  # the device idles for more than this share of the step
COMM_BOUND_PCT = 25.0  # exposed (not overlapped) communication above this share
MEMORY_BOUND_PCT = 25.0  # exposed copies/sets above this share
TINY_NOTE_PCT = 5.0  # many tiny kernels worth a note once they take 5 % of the kernel time (25 %: launch-bound)

RECOMMENDATIONS = {
    "data-bound": [
        "raise DataLoader num_workers (or use a memory-mapped / pre-batched dataset) and set pin_memory",
        "prefetch the next batch while the current step runs (prefetch_factor, a background thread)",
    ],
    "host-bound": [
        "enable torch.compile (fewer, fused kernels; less Python per step)",
        "fuse small kernels / use CUDA graphs (mode='reduce-overhead') to cut launch overhead",
        "remove host-device syncs (.item(), printing losses every step)",
    ],
    "communication-bound": [
        "overlap communication with compute (DDP buckets fire during backward; FSDP prefetch)",
        "increase the DDP bucket size (bucket_cap_mb) to send fewer, larger messages",
        "compress gradients (fp16/bf16 communication hooks) or use gradient accumulation with no_sync",
    ],
    "memory-bound": [
        "avoid host<->device copies in the step (keep data on device, pin memory, non_blocking=True)",
        "fuse elementwise chains (torch.compile) to cut memory traffic",
    ],
    "launch-bound": [
        "fuse the small kernels: torch.compile (train.compile=model+optimizer) merges elementwise chains "
        "such as an RNN cell's per-timestep adds into one kernel",
        "on a GPU, replay the step as CUDA graphs (torch.compile mode='reduce-overhead'): one launch for all",
        "use fused library kernels (cuDNN GRU/LSTM over the whole sequence, fused/foreach optimizers) "
        "instead of one small kernel per timestep or tensor",
        "give each kernel more work: a larger batch or model width",
    ],
    "compute-bound": [
        "profile the top kernels for better algorithms (fewer, larger matmuls); use fused optimizers",
    ],
}

# A CPU-only trace: the "device" is the host's operators (stride.profile.activity), so its idle time is time in
# the step when no operator ran (Python, the framework, waits), and there are no kernel launches, CUDA graphs,
# host-device syncs or pinned memory to advise. Bounds without an entry here take RECOMMENDATIONS' (they fit both).
CPU_RECOMMENDATIONS = {
    "data-bound": [
        "raise DataLoader num_workers (or use a memory-mapped / pre-batched dataset)",
        "prefetch the next batch while the current step runs (prefetch_factor, a background thread)",
    ],
    "host-bound": [
        "enable torch.compile (fewer, fused operators; less Python per step)",
        "find what runs between operators (Python code, logging, .item() / .tolist() conversions, sleeps, file or "
        "network I/O in the step): profile with with_stack=True, or py-spy",
        "check the intra-op threads against the cores (torch.set_num_threads, train.threads): a thread waiting for "
        "a core shows as time outside operators",
    ],
    "launch-bound": [
        "fuse the small operators: torch.compile (train.compile=model+optimizer) merges elementwise chains "
        "such as an RNN cell's per-timestep adds into one kernel",
        "use fused library operators (torch's GRU/LSTM over the whole sequence, foreach/fused optimizers) "
        "instead of one small operator per timestep or tensor",
        "give each operator more work: a larger batch or model width",
    ],
}

NO_ACTIVITY = "no-activity"  # the trace records no operator, kernel or collective: nothing to judge the step by


def no_activity_verdict(device: str) -> dict:
    """The verdict of a rank whose trace holds step annotations and nothing the analysis reads: its 100 % idle
    is the absence of records, not a measurement (a CPU-only run profiled without the CPU activity, say)."""
    what = "kernels, CPU operators" if device == "gpu" else "CPU operators"
    return {"bound": NO_ACTIVITY,
            "reasons": [f"the trace records no {what} or collectives inside its profiler steps (step annotations "
                        "only): its idle time is the absence of records, not a measurement"],
            "recommendations": ["profile again with the CPU activity on (torch.profiler activities=[ProfilerActivity."
                                "CPU" + (", ProfilerActivity.CUDA" if device == "gpu" else "")
                                + "]; `stride profile` does) so that operators are recorded"]}


def recommendations(bound: str, device: str) -> list[str]:
    """What to try for `bound` on `device` ("gpu" or "cpu": the device the trace ran on)."""
    return list(CPU_RECOMMENDATIONS.get(bound, RECOMMENDATIONS[bound]) if device == "cpu" else RECOMMENDATIONS[bound])


def step_verdict(fig: dict, tiny: dict | None = None, precision: str | None = None, device: str = "gpu") -> dict:
    """`tiny`: `kernels.tiny_kernels` of the same span; `precision`: the lower-precision advice the
    measurements allow (None: none); `device`: "gpu" or "cpu", what the trace ran on (the advice fits it)."""
    tb = fig["temporal_breakdown"]
    idle_of = "device idle" if device == "gpu" else "no CPU operator running"
    idle = tb["idle_pct"] or 0.0
    comm = tb["exposed_comm_pct"] or 0.0
    mem = tb["exposed_memory_pct"] or 0.0
    reasons: list[str] = []
    if idle > IDLE_BOUND_PCT:
        data = tb.get("data_wait_pct") or 0.0
        bound = "data-bound" if data >= idle / 2 else "host-bound"  # data wait is half the idle or more
        reasons.append(f"{idle_of} {idle:.1f}% of the step (> {IDLE_BOUND_PCT}%); waiting for data "
                       f"{data:.1f}% of the step")
    elif comm > COMM_BOUND_PCT:
        bound = "communication-bound"
        reasons.append(f"exposed communication {comm:.1f}% of the step (> {COMM_BOUND_PCT}%)")
    elif mem > MEMORY_BOUND_PCT:
        bound = "memory-bound"
        reasons.append(f"exposed memory copies/sets {mem:.1f}% of the step (> {MEMORY_BOUND_PCT}%)")
    elif tiny and tiny.get("dominant"):
        bound = "launch-bound"
        reasons.append(f"{tiny['count']:,} of {tiny['kernels']:,} {tiny['unit']} ({tiny['pct_of_kernels']:.0f}%) run "
                       f"under {tiny['threshold_us']:.0f} µs (median {tiny['median_us']:.1f} µs) and take "
                       f"{tiny['pct_of_kernel_time']:.0f}% of the kernel time: per-kernel overhead, not "
                       "arithmetic, sets the pace")
    else:
        bound = "compute-bound"
        compute = tb["compute_pct"] or 0.0
        reasons.append(f"compute {compute:.1f}% of the step; idle {idle:.1f}%, exposed comm {comm:.1f}%")
    recs = recommendations(bound, device)
    if bound == "compute-bound" and precision:
        recs.insert(0, precision)
    return {"bound": bound, "reasons": reasons, "recommendations": recs}


def rank_verdict(fig: dict, per_step: list[dict], tiny: dict | None, precision: str | None = None,
                 device: str = "gpu") -> dict:
    """The rank's verdict: the rule applied to its whole analysed span, plus the per-step tally."""
    v = step_verdict(fig, tiny, precision, device)
    tally: dict[str, int] = {}
    for s in per_step:
        tally[s["verdict"]["bound"]] = tally.get(s["verdict"]["bound"], 0) + 1
    v["steps_by_bound"] = tally
    if (tiny and tiny.get("flagged") and v["bound"] != "launch-bound"
            and (tiny["pct_of_kernel_time"] or 0.0) >= TINY_NOTE_PCT):
        v["recommendations"].append(
            f"{tiny['pct_of_kernels']:.0f}% of {tiny['unit']} run under {tiny['threshold_us']:.0f} µs "
            f"({tiny['pct_of_kernel_time']:.0f}% of their time): fuse small kernels (torch.compile, "
            "foreach/fused optimizers)"
        )
    return v
