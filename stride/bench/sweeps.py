"""Sweeps over one workload: batch size, and the tradeoff matrix of techniques on and off.

Each variant is the workload plus a few overrides, run through the same runner, so every figure in a
sweep is measured like the suite's. Reproducibility is checked by running a variant twice in
deterministic mode and comparing the parameter hashes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stride.bench.runner import run_workload
from stride.bench.workloads import Workload

TRADEOFFS: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "bf16": ("train.precision=bf16",),
    "fp16": ("train.precision=fp16",),
    "compile": ("train.compile=model+optimizer",),
    "ac_full": ("train.activation_checkpointing=full",),
    "grad_accum4": ("train.grad_accum=4",),
    "kernels_triton": ("train.kernels=triton",),
    "adamw8bit": ("optim.name=adamw8bit",),
    "adafactor": ("optim.name=adafactor",),
}


def batch_sweep(w: Workload, device: str, out: Path | None, sizes: list[int],
                extra: list[str] | None = None) -> list[dict[str, Any]]:
    entries = []
    for b in sizes:
        e = run_workload(w, device, out, [*(extra or []), f"train.batch_size={b}"], suffix=f"+bs{b}")
        entries.append(e)
    return entries


def tradeoff_matrix(w: Workload, device: str, out: Path | None, variants: list[str] | None = None,
                    extra: list[str] | None = None) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Entries for each variant and a matrix {variant: speed, memory, loss, stability, repeatable}."""
    names = variants or list(TRADEOFFS)
    unknown = [v for v in names if v not in TRADEOFFS]
    if unknown:
        raise ValueError(f"unknown tradeoff variant(s) {unknown}; variants are {', '.join(TRADEOFFS)}")
    entries, matrix = [], {}
    base: dict[str, Any] | None = None
    for v in names:
        ov = [*(extra or []), *TRADEOFFS[v], "train.deterministic=true"]
        e = run_workload(w, device, out, ov, suffix=f"+{v}")
        again = run_workload(w, device, None, ov, suffix=f"+{v}")
        entries.append(e)
        base = base or e
        matrix[v] = {
            "speed_ratio": (e["throughput"]["median"] / base["throughput"]["median"])
            if base["throughput"]["median"] else None,
            "mem_ratio": e["peak_mem_bytes"] / base["peak_mem_bytes"] if base["peak_mem_bytes"] else None,
            "activation_ratio": (e["saved_activation_bytes"] / base["saved_activation_bytes"])
            if e.get("saved_activation_bytes") and base.get("saved_activation_bytes") else None,
            "final_val_loss": e["final_val_loss"],
            "val_loss_delta": (e["final_val_loss"] - base["final_val_loss"])
            if e["final_val_loss"] is not None and base["final_val_loss"] is not None else None,
            "skipped_steps": e["skipped_steps"],
            "bitwise_repeatable": e["params_sha256"] == again["params_sha256"],
        }
    return entries, matrix


def time_to_target(w: Workload, device: str, out: Path | None, seeds: int,
                   extra: list[str] | None = None) -> dict[str, Any]:
    """MLPerf-style: the workload to its fixed target with `seeds` seeds; median and spread of the runs
    that reach it, and how many miss (a miss is reported, never averaged in)."""
    from stride.bench.stats import spread

    times, missed, entries = [], 0, []
    for seed in range(seeds):
        e = run_workload(w, device, out, [*(extra or []), f"train.seed={seed}", f"data.seed={seed}"],
                         suffix=f"+seed{seed}")
        entries.append(e)
        if e["time_to_target_s"] is None:
            missed += 1
        else:
            times.append(e["time_to_target_s"])
    return {"target_val_loss": entries[0]["target_val_loss"], "runs": seeds, "missed": missed,
            "seconds": spread(times), "entries": entries}
