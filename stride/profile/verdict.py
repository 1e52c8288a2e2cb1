"""A verdict per step (data-, host-, communication-, memory-, launch- or compute-bound) with recommendations.

The rules read the summarized figures of `breakdown.summarize` and the tiny-kernel figures of
`kernels.tiny_kernels` in a fixed order; each rule's threshold is stated next to it, so a verdict can
be traced to its figures. A busy device is not compute-bound when its time goes to many tiny kernels
(a GRU step of 2,290 `add_` kernels of 4 µs each, at 3-20 % MFU): their fixed cost sets the pace, and
fusion, compile or CUDA graphs help where a faster matmul dtype does not. Lower precision is advised
only where it measured faster (`stride.metrics.dtype_speed.precision_line`).

CPU traces have their own order and rules (the host is the device; `activity`, `breakdown`): many tiny operators
come before memory (an elementwise op of 3 µs is paced by dispatch, not by bandwidth); memory-bound is
bandwidth-bound operator time over 25 % of the step and over the compute time; matmul advice (lower precision,
fewer larger matmuls) is given only where matmul/conv operators take at least half the operator time, since
autocast speeds matmuls and leaves elementwise ops in fp32. Data wait that no annotation measured is said so.
"""

from __future__ import annotations

from stride.profile.classify import DATA_ANNOTATIONS_DOC

IDLE_BOUND_PCT = 30.0  # the device idles for more than this share of the step
COMM_BOUND_PCT = 25.0  # exposed (not overlapped) communication above this share
MEMORY_BOUND_PCT = 25.0  # exposed copies/sets above this share
TINY_NOTE_PCT = 5.0  # many tiny kernels worth a note once they take 5 % of the kernel time (25 %: launch-bound)
TINY_NOTE_STEP_PCT = 1.0  # ... and 1 % of the step: a data-bound step's 6 % of operators is not worth fusing
MATMUL_ADVICE_SHARE = 50.0  # CPU: matmul advice where matmul/conv take at least half of the operator time

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
    "memory-bound": [
        "fuse the elementwise chains: torch.compile (train.compile=model+optimizer) runs a chain of pointwise "
        "operators as one pass over memory instead of one pass per operator",
        "store activations in a narrower dtype where accuracy allows (bf16 tensors halve the bytes each operator "
        "moves; autocast does not do this: it leaves elementwise operators in fp32); measure, as CPU bf16 "
        "arithmetic can be slower",
        "cut copies in the step (.contiguous(), .to(), torch.cat, clone); use in-place operators where autograd "
        "allows, and a foreach/fused optimizer (one pass over the parameters)",
    ],
}
# CPU, compute-bound with little matmul/conv time: no lower precision, no "larger matmuls"
CPU_NOT_MATMUL = ("matmul/conv operators take {math:.0f}% of the operator time: a lower precision (autocast speeds "
                  "matmuls only) or larger matmuls would not help; the top operators show where the time goes, and "
                  "torch.compile fuses elementwise chains and cuts per-operator overhead")
CPU_COMPILED = ("{compiled:.1f}% of the step runs inside compiled graphs whose operators the trace does not show "
                "(counted as compute): set torch._inductor.config.cpp.enable_kernel_profile = True before compiling "
                "to see their kernels")
CPU_DATA_UNMEASURED = ("if the step loads data outside a DataLoader, wrap the loading in torch.profiler."
                       "record_function('data'): data wait is measured only inside data-loading annotations")

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
    if device == "cpu":
        return _cpu_step_verdict(fig, tiny, precision)
    tb = fig["temporal_breakdown"]
    idle_of = "device idle"
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
        reasons.append(_tiny_reason(tiny))
    else:
        bound = "compute-bound"
        compute = tb["compute_pct"] or 0.0
        reasons.append(f"compute {compute:.1f}% of the step; idle {idle:.1f}%, exposed comm {comm:.1f}%")
    recs = recommendations(bound, device)
    if bound == "compute-bound" and precision:
        recs.insert(0, precision)
    return {"bound": bound, "reasons": reasons, "recommendations": recs}


def _tiny_reason(tiny: dict) -> str:
    return (f"{tiny['count']:,} of {tiny['kernels']:,} {tiny['unit']} ({tiny['pct_of_kernels']:.0f}%) run "
            f"under {tiny['threshold_us']:.0f} µs (median {tiny['median_us']:.1f} µs) and take "
            f"{tiny['pct_of_kernel_time']:.0f}% of the kernel time: per-kernel overhead, not "
            "arithmetic, sets the pace")


def _cpu_step_verdict(fig: dict, tiny: dict | None, precision: str | None) -> dict:
    """The CPU rules: idle (data or host), communication, tiny operators, bandwidth-bound operators, compute; matmul
    advice only for a step whose operator time is mostly matmul/conv."""
    tb, ot = fig["temporal_breakdown"], fig.get("operator_time") or {}
    idle = tb["idle_pct"] or 0.0
    comm = tb["exposed_comm_pct"] or 0.0
    mem = tb["exposed_memory_pct"] or 0.0
    compute = tb["compute_pct"] or 0.0
    math, compiled = ot.get("math_pct") or 0.0, ot.get("compiled_pct") or 0.0
    work = math + (ot.get("bandwidth_pct") or 0.0) + (ot.get("other_pct") or 0.0) + compiled
    math_share = 100.0 * math / work if work > 0 else 0.0
    reasons: list[str] = []
    extra: list[str] = []
    if idle > IDLE_BOUND_PCT:
        data = tb.get("data_wait_pct")
        loader = ot.get("data_loading_pct") or 0.0
        why = (f"no CPU operator running {idle:.1f}% of the step (> {IDLE_BOUND_PCT}%)"
               + (f", the data loader's operators ({loader:.1f}% of the step) counted as waiting for data"
                  if loader >= 0.05 else ""))
        if data is None:
            bound = "host-bound"
            reasons.append(f"{why}; waiting for data not measured: the trace has no data-loading annotation "
                           f"({DATA_ANNOTATIONS_DOC}), so data loaded outside one counts as idle")
            extra.append(CPU_DATA_UNMEASURED)
        else:
            bound = "data-bound" if data >= idle / 2 else "host-bound"  # data wait is half the idle or more
            reasons.append(f"{why}; waiting for data {data:.1f}% of the step")
    elif comm > COMM_BOUND_PCT:
        bound = "communication-bound"
        reasons.append(f"exposed communication {comm:.1f}% of the step (> {COMM_BOUND_PCT}%)")
    elif tiny and tiny.get("dominant"):
        bound = "launch-bound"
        reasons.append(_tiny_reason(tiny))
    elif mem > MEMORY_BOUND_PCT and mem >= compute:
        bound = "memory-bound"
        reasons.append(f"bandwidth-bound operators (elementwise, reductions, copies, norms) {mem:.1f}% of the step "
                       f"(> {MEMORY_BOUND_PCT}%), compute {compute:.1f}% (matmul/conv {math:.1f}%)")
    else:
        bound = "compute-bound"
        reasons.append(f"compute {compute:.1f}% of the step (matmul/conv {math:.1f}%, {math_share:.0f}% of the "
                       f"operator time); bandwidth-bound operators {mem:.1f}%, idle {idle:.1f}%, exposed comm "
                       f"{comm:.1f}%")
    recs = recommendations(bound, "cpu")
    if bound == "compute-bound":
        if math_share >= MATMUL_ADVICE_SHARE:
            if precision:
                recs.insert(0, precision)
        else:
            recs = [CPU_NOT_MATMUL.format(math=math_share)]
            if compiled >= 0.5 * compute:
                recs.insert(0, CPU_COMPILED.format(compiled=compiled))
        if mem > MEMORY_BOUND_PCT:
            recs.append(f"bandwidth-bound operators take {mem:.1f}% of the step too: fuse their elementwise chains "
                        "(torch.compile) and cut copies")
    return {"bound": bound, "reasons": reasons, "recommendations": recs + extra}


def rank_verdict(fig: dict, per_step: list[dict], tiny: dict | None, precision: str | None = None,
                 device: str = "gpu") -> dict:
    """The rank's verdict: the rule applied to its whole analysed span, plus the per-step tally. The "fuse small
    kernels" note is added where they matter: not to a data-bound step (the loader sets its pace), and only where
    the tiny ones take TINY_NOTE_PCT of the kernel time and TINY_NOTE_STEP_PCT of the step."""
    v = step_verdict(fig, tiny, precision, device)
    tally: dict[str, int] = {}
    for s in per_step:
        tally[s["verdict"]["bound"]] = tally.get(s["verdict"]["bound"], 0) + 1
    v["steps_by_bound"] = tally
    busy = 100.0 - (fig["temporal_breakdown"]["idle_pct"] or 0.0)
    if (tiny and tiny.get("flagged") and v["bound"] not in ("launch-bound", "data-bound")
            and (tiny["pct_of_kernel_time"] or 0.0) >= TINY_NOTE_PCT
            and busy * (tiny["pct_of_kernel_time"] or 0.0) / 100.0 >= TINY_NOTE_STEP_PCT):
        v["recommendations"].append(
            f"{tiny['pct_of_kernels']:.0f}% of {tiny['unit']} run under {tiny['threshold_us']:.0f} µs "
            f"({tiny['pct_of_kernel_time']:.0f}% of their time): fuse small kernels (torch.compile, "
            "foreach/fused optimizers)"
        )
    return v
