"""A verdict per step (compute-, memory-, communication-, host- or data-bound) with recommendations.

The rules read the summarized figures of `breakdown.summarize` in a fixed order; each rule's
threshold is a share of the step span, stated next to it, so a verdict can be traced to its figures.
"""

from __future__ import annotations

IDLE_BOUND_PCT = 30.0  # the device idles for more than this share of the step
COMM_BOUND_PCT = 25.0  # exposed (not overlapped) communication above this share
MEMORY_BOUND_PCT = 25.0  # exposed copies/sets above this share

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
    "compute-bound": [
        "use bf16 autocast / TF32 and fused optimizers; profile the top kernels for better algorithms",
    ],
}


def step_verdict(fig: dict) -> dict:
    tb, ib = fig["temporal_breakdown"], fig["idle_breakdown"]
    idle = tb["idle_pct"] or 0.0
    comm = tb["exposed_comm_pct"] or 0.0
    mem = tb["exposed_memory_pct"] or 0.0
    reasons: list[str] = []
    if idle > IDLE_BOUND_PCT:
        data = ib["data_wait_pct"] or 0.0
        bound = "data-bound" if data >= 50.0 else "host-bound"
        reasons.append(
            f"device idle {idle:.1f}% of the step (> {IDLE_BOUND_PCT}%), {data:.1f}% of it while loading data"
        )
    elif comm > COMM_BOUND_PCT:
        bound = "communication-bound"
        reasons.append(f"exposed communication {comm:.1f}% of the step (> {COMM_BOUND_PCT}%)")
    elif mem > MEMORY_BOUND_PCT:
        bound = "memory-bound"
        reasons.append(f"exposed memory copies/sets {mem:.1f}% of the step (> {MEMORY_BOUND_PCT}%)")
    else:
        bound = "compute-bound"
        compute = tb["compute_pct"] or 0.0
        reasons.append(f"compute {compute:.1f}% of the step; idle {idle:.1f}%, exposed comm {comm:.1f}%")
    return {"bound": bound, "reasons": reasons, "recommendations": list(RECOMMENDATIONS[bound])}


def rank_verdict(fig: dict, per_step: list[dict], tiny: dict | None) -> dict:
    """The rank's verdict: the rule applied to its whole analysed span, plus the per-step tally."""
    v = step_verdict(fig)
    tally: dict[str, int] = {}
    for s in per_step:
        tally[s["verdict"]["bound"]] = tally.get(s["verdict"]["bound"], 0) + 1
    v["steps_by_bound"] = tally
    if tiny and tiny.get("flagged"):
        v["recommendations"].append(
            f"{tiny['pct_of_kernels']:.0f}% of kernels run under {tiny['threshold_us']:.0f} µs: fuse small kernels "
            "(torch.compile, foreach/fused optimizers)"
        )
    return v
