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

Where no threshold rule fires, the verdict is the largest of compute, exposed communication and exposed memory (it
was compute-bound, also at compute 19 % of a step 72 % of which was the all-reduce by its own clock: audit 17, H2).
A verdict within BORDERLINE_PTS of its threshold or of the runner-up share says so. The idle rule leaves out the
time the profiler itself added to the step where the trace records the unprofiled step (`run_meta`): its
per-operator cost shows as idle (a 0.62 ms step of 64-wide layers traced at 0.99 ms read host-bound).
"""

from __future__ import annotations

from stride.profile.classify import DATA_ANNOTATIONS_DOC

IDLE_BOUND_PCT = 30.0  # the device idles for more than this share of the step
COMM_BOUND_PCT = 25.0  # exposed (not overlapped) communication above this share
MEMORY_BOUND_PCT = 25.0  # exposed copies/sets above this share
TINY_NOTE_PCT = 5.0  # many tiny kernels worth a note once they take 5 % of the kernel time (25 %: launch-bound)
TINY_NOTE_STEP_PCT = 1.0  # ... and 1 % of the step: a data-bound step's 6 % of operators is not worth fusing
MATMUL_ADVICE_SHARE = 50.0  # CPU: matmul advice where matmul/conv take at least half of the operator time
BORDERLINE_PTS = 2.0  # a verdict this close (points of the step) to its threshold or the runner-up says so
DATA_NOTE_PCT = 10.0  # data wait worth a line in a verdict that is not about idle time
COMPILED_PCT = 30.0  # compiled code this share of the step: the advice does not ask to compile again

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
NARROWER_STORAGE = "store activations in a narrower dtype"  # the generic advice a measured precision replaces
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
    # measured on 2-rank gloo DDP (audit 17, M4): accumulation with no_sync 2.4x per sample; 100 MB buckets no
    # faster than 25 MB; the fp16 compression hook 15-40 % slower (its casts are CPU work), so it is not offered
    "communication-bound": [
        "accumulate gradients over several micro-batches and sync once (train.grad_accum; DDP's no_sync() on all "
        "but the last): one all-reduce per N micro-batches (2.4x per sample measured on a 2-rank gloo run)",
        "give the collectives a core: a gloo thread overlaps compute only where ranks x (intra-op threads + 1) "
        "fit the cores (fewer train.threads or fewer ranks per host)",
        "bigger DDP buckets (bucket_cap_mb) only as something to measure: on gloo 100 MB did not beat 25 MB",
    ],
    "memory-bound": [
        "fuse the elementwise chains: torch.compile (train.compile=model+optimizer) runs a chain of pointwise "
        "operators as one pass over memory instead of one pass per operator",
        NARROWER_STORAGE + " where accuracy allows (bf16 tensors halve the bytes each operator "
        "moves; autocast does not do this: it leaves elementwise operators in fp32); measure, as CPU bf16 "
        "arithmetic can be slower",
        "cut copies in the step (.contiguous(), .to(), torch.cat, clone); use in-place operators where autograd "
        "allows, and a foreach/fused optimizer (one pass over the parameters)",
    ],
}
# CPU, compute-bound with little matmul/conv time: no lower precision, no "larger matmuls"
CPU_NOT_MATMUL = ("matmul/conv operators take {math:.0f}% of the operator time: a lower precision (autocast speeds "
                  "matmuls only) or larger matmuls would not help; the top operators show where the time goes")
CPU_NOT_MATMUL_COMPILE = ", and torch.compile fuses elementwise chains and cuts per-operator overhead"
CPU_COMPILED = ("{compiled:.1f}% of the step runs inside compiled graphs whose operators the trace does not show "
                "(counted as compute): set torch._inductor.config.cpp.enable_kernel_profile = True before compiling "
                "to see their kernels")
CPU_DATA_UNMEASURED = ("if the step loads data outside a DataLoader, wrap the loading in torch.profiler."
                       "record_function('data'): data wait is measured only inside data-loading annotations")

# M2 of audit 17: after torch.compile the first advice was torch.compile again. What is left once compiled:
COMPILED_LEFT = {
    "host-bound": "what is left is the time between operators: graph breaks and Python outside the compiled regions "
                  "(torch._dynamo.explain lists the breaks), and the parts of the step not compiled",
    "launch-bound": "the small operators left run outside the compiled regions (graph breaks) or are the generated "
                    "kernels themselves: give each more work (a larger batch or width), or use fused library operators",
    "memory-bound": "what is left is the memory the generated kernels move: narrower storage (bf16 tensors) or fewer "
                    "materialised activations",
    "compute-bound": "what is left is the arithmetic of the compiled graphs and of the operators outside them",
}
COMPILED_ALREADY = ("{share:.0f}% of the step already runs in compiled code (torch.compile regions, inductor "
                    "kernels): compiling again will not cut it; {left}")

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
    raw_idle = tb["idle_pct"] or 0.0
    idle, without = _idle_for_rule(fig, raw_idle)
    comm = tb["exposed_comm_pct"] or 0.0
    mem = tb["exposed_memory_pct"] or 0.0
    compute = tb["compute_pct"] or 0.0
    kt = fig.get("kernel_time") or {}  # compute kernels by what bounds them: bandwidth-bound ones are memory's
    bw = kt.get("bandwidth_pct") or 0.0
    reasons: list[str] = []
    if idle > IDLE_BOUND_PCT:
        data = tb.get("data_wait_pct") or 0.0
        bound = "data-bound" if data >= idle / 2 else "host-bound"  # data wait is half the idle or more
        reasons.append(f"{idle_of} {idle:.1f}% of the step{without} (> {IDLE_BOUND_PCT}%); waiting for data "
                       f"{data:.1f}% of the step" + _borderline((idle, IDLE_BOUND_PCT), (data, idle / 2)))
    elif comm > COMM_BOUND_PCT:
        bound = "communication-bound"
        reasons.append(f"exposed communication {comm:.1f}% of the step (> {COMM_BOUND_PCT}%)"
                       + _borderline((comm, COMM_BOUND_PCT)))
    elif mem > MEMORY_BOUND_PCT:
        bound = "memory-bound"
        reasons.append(f"exposed memory copies/sets {mem:.1f}% of the step (> {MEMORY_BOUND_PCT}%)"
                       + _borderline((mem, MEMORY_BOUND_PCT)))
    elif tiny and tiny.get("dominant"):
        bound = "launch-bound"
        reasons.append(_tiny_reason(tiny))
    elif bw + mem > MEMORY_BOUND_PCT and bw + mem >= compute - bw:
        bound = "memory-bound"
        math = kt.get("math_pct") or 0.0
        reasons.append(f"bandwidth-bound kernels (elementwise, reductions, norms, indexing) {bw:.1f}% of the step and "
                       f"exposed copies/sets {mem:.1f}% (together > {MEMORY_BOUND_PCT}%), matmul/conv kernels "
                       f"{math:.1f}%, other compute {max(compute - bw - math, 0.0):.1f}%"
                       + _borderline((bw + mem, MEMORY_BOUND_PCT), (bw + mem, compute - bw)))
    else:
        bound, why = _largest(compute, comm, mem, "exposed memory copies/sets", raw_idle)
        reasons.append(why)
    if without and idle <= IDLE_BOUND_PCT < raw_idle:
        reasons.append(_profiler_note(fig, raw_idle, idle))
    recs = recommendations(bound, device)
    if bound == "memory-bound" and bw > mem:  # the kernels, not the copies: fusing them comes first
        recs.reverse()
    if bound == "compute-bound" and precision:
        recs.insert(0, precision)
    return {"bound": bound, "reasons": reasons, "recommendations": recs + _data_line(bound, tb),
            "borderline": "(borderline:" in reasons[0]}


def _borderline(*pairs: tuple[float, float]) -> str:
    """' (borderline: A% vs B%)' for the closest (share, threshold or runner-up) pair within BORDERLINE_PTS."""
    a, b = min(pairs, key=lambda p: abs(p[0] - p[1]))
    return f" (borderline: {a:.1f}% vs {b:.1f}%)" if abs(a - b) <= BORDERLINE_PTS else ""


def _largest(compute: float, comm: float, mem: float, mem_name: str, idle: float) -> tuple[str, str]:
    """No threshold fired: the bound of the largest share of the step, with all three named."""
    shares = sorted([("compute-bound", "compute", compute), ("communication-bound", "exposed communication", comm),
                     ("memory-bound", mem_name, mem)], key=lambda x: -x[2])
    (bound, name, top), rest = shares[0], shares[1:]
    return bound, (f"{name} {top:.1f}% of the step, the largest share (no threshold rule fired); "
                   + ", ".join(f"{n} {v:.1f}%" for _, n, v in rest) + f", idle {idle:.1f}%"
                   + _borderline((top, rest[0][2])))


def _idle_for_rule(fig: dict, idle: float) -> tuple[float, str]:
    """The idle share the idle rule reads: without the time the profiler added to the step where the trace records
    the unprofiled step (`step_time`), else as traced; and the words that say so ('' where nothing was taken out)."""
    st = fig.get("step_time") or {}
    adj = st.get("idle_pct_excluding_profiler")
    if adj is None or adj >= idle - 0.05:
        return idle, ""
    return adj, f" without the profiler's own cost ({idle:.1f}% of the profiled step)"


def _profiler_note(fig: dict, raw: float, adj: float) -> str:
    st = fig["step_time"]
    return (f"idle {raw:.1f}% of the profiled step is {adj:.1f}% without the time the profiler added (profiled step "
            f"{st['profiled_ms']:.2f} ms, unprofiled {st['unprofiled_ms']:.2f} ms: {st['ratio']:.2f}x): under the "
            f"{IDLE_BOUND_PCT}% idle rule")


def _data_line(bound: str, tb: dict) -> list[str]:
    """A line about data where waiting for it is a good part of a step that is bound by something else."""
    data = tb.get("data_wait_pct")
    if bound in ("data-bound", "host-bound", NO_ACTIVITY) or data is None or data < DATA_NOTE_PCT:
        return []
    return [f"waiting for data takes {data:.1f}% of the step too: raise DataLoader num_workers, or prefetch the next "
            "batch while the step runs (prefetch_factor, a background thread)"]


def _compiled_already(bound: str, recs: list[str], share: float) -> list[str]:
    """Advice for a step that runs mostly compiled: no "use torch.compile", and what is left to do instead."""
    if bound not in COMPILED_LEFT:
        return recs
    return ([COMPILED_ALREADY.format(share=share, left=COMPILED_LEFT[bound])]
            + [r for r in recs if "torch.compile" not in r])


def _tiny_reason(tiny: dict) -> str:
    return (f"{tiny['count']:,} of {tiny['kernels']:,} {tiny['unit']} ({tiny['pct_of_kernels']:.0f}%) run "
            f"under {tiny['threshold_us']:.0f} µs (median {tiny['median_us']:.1f} µs) and take "
            f"{tiny['pct_of_kernel_time']:.0f}% of the kernel time: per-kernel overhead, not "
            "arithmetic, sets the pace")


def _cpu_step_verdict(fig: dict, tiny: dict | None, precision: str | None) -> dict:
    """The CPU rules: idle (data or host), communication, tiny operators, bandwidth-bound operators, else the largest
    share; matmul advice only for a step whose operator time is mostly matmul/conv."""
    tb, ot = fig["temporal_breakdown"], fig.get("operator_time") or {}
    raw_idle = tb["idle_pct"] or 0.0
    idle, without = _idle_for_rule(fig, raw_idle)
    comm = tb["exposed_comm_pct"] or 0.0
    mem = tb["exposed_memory_pct"] or 0.0
    compute = tb["compute_pct"] or 0.0
    math, compiled = ot.get("math_pct") or 0.0, ot.get("compiled_pct") or 0.0
    in_compiled = ot.get("compiled_region_pct") or 0.0
    work = math + (ot.get("bandwidth_pct") or 0.0) + (ot.get("other_pct") or 0.0) + compiled
    math_share = 100.0 * math / work if work > 0 else 0.0
    reasons: list[str] = []
    extra: list[str] = []
    if idle > IDLE_BOUND_PCT:
        data = tb.get("data_wait_pct")
        loader = ot.get("data_loading_pct") or 0.0
        why = (f"no CPU operator running {idle:.1f}% of the step{without} (> {IDLE_BOUND_PCT}%)"
               + (f", the data loader's operators ({loader:.1f}% of the step) counted as waiting for data"
                  if loader >= 0.05 else ""))
        if data is None:
            bound = "host-bound"
            reasons.append(f"{why}; waiting for data not measured: the trace has no data-loading annotation "
                           f"({DATA_ANNOTATIONS_DOC}), so data loaded outside one counts as idle"
                           + _borderline((idle, IDLE_BOUND_PCT)))
            extra.append(CPU_DATA_UNMEASURED)
        else:
            bound = "data-bound" if data >= idle / 2 else "host-bound"  # data wait is half the idle or more
            reasons.append(f"{why}; waiting for data {data:.1f}% of the step"
                           + _borderline((idle, IDLE_BOUND_PCT), (data, idle / 2)))
    elif comm > COMM_BOUND_PCT:
        bound = "communication-bound"
        rule = fig.get("comm_overlap_rule") or {}
        hidden = ("; communication under compute counted as exposed: " + rule["short"]
                  if rule.get("short") and not rule.get("overlap_counted") and rule.get("concurrent_pct") else "")
        reasons.append(f"exposed communication {comm:.1f}% of the step (> {COMM_BOUND_PCT}%)"
                       + _borderline((comm, COMM_BOUND_PCT)) + hidden)
    elif tiny and tiny.get("dominant"):
        bound = "launch-bound"
        reasons.append(_tiny_reason(tiny))
    elif mem > MEMORY_BOUND_PCT and mem >= compute:
        bound = "memory-bound"
        reasons.append(f"bandwidth-bound operators (elementwise, reductions, copies, norms) {mem:.1f}% of the step "
                       f"(> {MEMORY_BOUND_PCT}%), compute {compute:.1f}% (matmul/conv {math:.1f}%)"
                       + _borderline((mem, MEMORY_BOUND_PCT), (mem, compute)))
    else:
        bound, why = _largest(compute, comm, mem, "bandwidth-bound operators", raw_idle)
        if bound == "compute-bound":
            why = (f"compute {compute:.1f}% of the step, the largest share (matmul/conv {math:.1f}%, "
                   f"{math_share:.0f}% of the operator time); bandwidth-bound operators {mem:.1f}%, exposed comm "
                   f"{comm:.1f}%, idle {raw_idle:.1f}%" + _borderline((compute, max(comm, mem))))
        reasons.append(why)
    if without and idle <= IDLE_BOUND_PCT < raw_idle:
        reasons.append(_profiler_note(fig, raw_idle, idle))
    recs = recommendations(bound, "cpu")
    if bound == "compute-bound":
        if math_share >= MATMUL_ADVICE_SHARE:
            if precision:
                recs.insert(0, precision)
        else:
            recs = [CPU_NOT_MATMUL.format(math=math_share)
                    + ("" if in_compiled >= COMPILED_PCT else CPU_NOT_MATMUL_COMPILE)]
            if compiled >= 0.5 * compute:
                recs.insert(0, CPU_COMPILED.format(compiled=compiled))
        if mem > MEMORY_BOUND_PCT:
            recs.append(f"bandwidth-bound operators take {mem:.1f}% of the step too: fuse their elementwise chains "
                        "(torch.compile) and cut copies")
    if bound == "memory-bound" and precision and precision.startswith(("use ", "keep fp32")):
        # this workload's step measured in each dtype (stride profile): its figure, not the generic "try a narrower
        # dtype, measure" (first-contact audit: bf16 at 0.55x fp32 was still told to try bf16, and at 1.31x not
        # told to use it)
        recs = [precision if r.startswith(NARROWER_STORAGE) else r for r in recs]
    if in_compiled >= COMPILED_PCT:
        recs = _compiled_already(bound, recs, in_compiled)
    return {"bound": bound, "reasons": reasons, "recommendations": recs + _data_line(bound, tb) + extra,
            "borderline": "(borderline:" in reasons[0]}


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
    compiled = ((fig.get("operator_time") or {}).get("compiled_region_pct") or 0.0) >= COMPILED_PCT
    if (tiny and tiny.get("flagged") and v["bound"] not in ("launch-bound", "data-bound")
            and (tiny["pct_of_kernel_time"] or 0.0) >= TINY_NOTE_PCT
            and busy * (tiny["pct_of_kernel_time"] or 0.0) / 100.0 >= TINY_NOTE_STEP_PCT):
        v["recommendations"].append(
            f"{tiny['pct_of_kernels']:.0f}% of {tiny['unit']} run under {tiny['threshold_us']:.0f} µs "
            f"({tiny['pct_of_kernel_time']:.0f}% of their time): fuse small kernels ("
            + ("outside the compiled regions; " if compiled else "torch.compile, ") + "foreach/fused optimizers)"
        )
    return v
