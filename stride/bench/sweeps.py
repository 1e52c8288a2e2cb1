"""Sweeps over workloads: the suite, batch sizes, the tradeoff matrix, time to target.

A sweep is planned as a list of variants (a workload plus a few overrides), each run through the same
runner, so every figure in a sweep is measured like the suite's. `run_sweep` runs them in order with a
progress display and writes results.json after each one (stride.bench.journal), so a stopped sweep
keeps what it finished and a rerun resumes. Summaries (the tradeoff matrix, time to target) are
computed from the entries alone, so a resumed sweep's summary equals an uninterrupted one's.
Reproducibility is checked by running a tradeoff variant twice in deterministic mode and comparing
the parameter hashes.
"""

from __future__ import annotations

import math
import shutil
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stride.bench.journal import ResultsJournal
from stride.bench.progress import StepReporter, SweepProgress
from stride.bench.runner import run_workload, workload_config
from stride.bench.stats import spread
from stride.bench.stop import StopRequest
from stride.bench.workloads import TRADEOFFS, Workload, check_variants
from stride.config import config_hash, config_to_dict


@dataclass(frozen=True)
class Variant:
    """One measured unit of a sweep; `runs` = 2 runs it again without output to check bitwise repeatability."""

    workload: Workload
    suffix: str  # "" (the suite), "+bf16", "+bs64", "+seed0"
    overrides: tuple[str, ...]
    runs: int = 1

    @property
    def name(self) -> str:
        return self.workload.name + self.suffix

    def config(self, device: str) -> Any:
        return workload_config(self.workload, self.name, device, list(self.overrides))

    def steps(self, device: str) -> int:
        if self.workload.kind == "ppo":
            return int(dict(self.workload.params).get("updates", 0)) * self.runs
        return self.config(device).train.steps * self.runs


def suite_variants(w: Workload, extra: list[str] | None = None) -> list[Variant]:
    return [Variant(w, "", tuple(extra or []))]


def batch_variants(w: Workload, sizes: list[int], extra: list[str] | None = None) -> list[Variant]:
    return [Variant(w, f"+bs{b}", (*(extra or []), f"train.batch_size={b}")) for b in sizes]


def tradeoff_variants(w: Workload, variants: list[str] | None = None, extra: list[str] | None = None) -> list[Variant]:
    names = variants or list(TRADEOFFS)
    check_variants(names)
    return [Variant(w, f"+{v}", (*(extra or []), *TRADEOFFS[v], "train.deterministic=true"), runs=2) for v in names]


def ttt_variants(w: Workload, seeds: int, extra: list[str] | None = None) -> list[Variant]:
    return [Variant(w, f"+seed{s}", (*(extra or []), f"train.seed={s}", f"data.seed={s}")) for s in range(seeds)]


def plan_sweep(kind: str | None, workloads: list[Workload], extra: list[str] | None = None, *,
               batch_sizes: list[int] | None = None, variants: list[str] | None = None,
               seeds: int = 1) -> list[Variant]:
    """Every variant of sweep `kind` (None: the suite, batch, tradeoffs, ttt) over `workloads`, in run order."""
    plan: list[Variant] = []
    for w in workloads:
        if kind == "batch":
            plan += batch_variants(w, batch_sizes or [], extra)
        elif kind == "tradeoffs":
            plan += tradeoff_variants(w, variants, extra)
        elif kind == "ttt":
            plan += ttt_variants(w, seeds, extra)
        elif kind is None:
            plan += suite_variants(w, extra)
        else:
            raise ValueError(f"no variant plan for sweep {kind!r}")
    return plan


def sweep_sections(kind: str | None) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    """results.json's summary sections of sweep `kind`, computed from the entries finished so far."""
    def sections(entries: list[dict[str, Any]]) -> dict[str, Any]:
        groups = by_workload(entries)
        if kind == "tradeoffs":
            return {"tradeoffs": {n: tradeoff_summary(es) for n, es in groups.items()}}
        if kind == "ttt":
            return {"time_to_target": {n: ttt_summary(es) for n, es in groups.items()}}
        return {}

    return sections


def run_variant(v: Variant, device: str, out: Path | None, progress: SweepProgress | None = None,
                stop: StopRequest | None = None) -> dict[str, Any]:
    """The variant's results entry; a second run (v.runs == 2) adds `repeat_params_sha256`."""
    steps = v.steps(device) // v.runs

    def reporter(k: int) -> list[Any]:
        return [StepReporter(progress, k * steps, stop)] if progress is not None else []

    cfg = v.config(device)
    check = stop.check if stop is not None else None  # PPO's own loop: between its updates
    e = run_workload(v.workload, device, out, list(v.overrides), suffix=v.suffix, callbacks=reporter(0),
                     after_update=check)
    e["config_hash"] = config_hash(cfg)
    if v.runs == 2:
        again = run_workload(v.workload, device, None, list(v.overrides), suffix=v.suffix, callbacks=reporter(1),
                             after_update=check)
        e["repeat_params_sha256"] = again["params_sha256"]
    return e


def run_sweep(variants: list[Variant], device: str, journal: ResultsJournal, progress: SweepProgress,
              out: Path, stop: StopRequest | None = None) -> list[dict[str, Any]]:
    """Run every variant not already in `journal` (same config), recording each as soon as it finishes; a stop
    signal noted by `stop` ends the sweep before the next variant or at the next step's end."""
    kept = {}
    for v in variants:  # every stored entry checked before anything runs: a changed config stops at once
        cfg = v.config(device)
        kept[v.name] = journal.finished(v.name, config_hash(cfg), v.workload.version, config_to_dict(cfg))
    for v in variants:
        if kept[v.name] is not None:
            progress.skip(v.name, kept[v.name])
            continue
        if stop is not None:
            stop.check()
        stale = out / v.name
        if stale.exists():  # the run directory of a variant stopped mid-way: not a result, start it afresh
            shutil.rmtree(stale)
        progress.start(v.name, v.runs)
        e = run_variant(v, device, out, progress, stop)
        journal.add(e)
        progress.finish(v.name, e)
    return [journal.entries[v.name] for v in variants]


def tradeoff_summary(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{variant: speed, memory, loss, stability, repeatable} against the first entry (the baseline)."""
    matrix: dict[str, dict[str, Any]] = {}
    base = entries[0] if entries else {}
    for e in entries:
        v = e["name"].split("+", 1)[1]
        matrix[v] = {
            "speed_ratio": (e["throughput"]["median"] / base["throughput"]["median"])
            if base["throughput"]["median"] and e["throughput"]["median"] else None,
            "mem_ratio": e["peak_mem_bytes"] / base["peak_mem_bytes"] if base["peak_mem_bytes"] else None,
            "activation_ratio": (e["saved_activation_bytes"] / base["saved_activation_bytes"])
            if e.get("saved_activation_bytes") and base.get("saved_activation_bytes") else None,
            "final_val_loss": e["final_val_loss"],
            "val_loss_delta": (e["final_val_loss"] - base["final_val_loss"])
            if e["final_val_loss"] is not None and base["final_val_loss"] is not None else None,
            "skipped_steps": e["skipped_steps"],
            "bitwise_repeatable": e["params_sha256"] == e.get("repeat_params_sha256"),
        }
    return matrix


def median_with_misses(times: list[float | None]) -> float | None:
    """The median time to target over every seed, a miss (None) counted as never (infinite); None where that median
    is not reached: more than half the seeds missed, or, with an even count, half (the midpoint of a hit and a miss
    is never). The hits' median alone, {8.9, 11.5} of 3 seeds with one miss, read 10.2 s, a time a seed reaches the
    target with a probability of a third; over all seeds it is 11.5 s."""
    if not times:
        return None
    med = statistics.median(sorted(math.inf if t is None else float(t) for t in times))
    return med if math.isfinite(med) else None


def ttt_summary(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """MLPerf-style: median and spread of the seeds that reach the target (`seconds`), misses counted, never
    averaged in; and `median_all_s`, the median over every seed with a miss counted as never (`median_with_misses`),
    the figure a run of this workload to its target is priced at."""
    times = [e["time_to_target_s"] for e in entries if e["time_to_target_s"] is not None]
    return {"target_val_loss": entries[0]["target_val_loss"] if entries else None, "runs": len(entries),
            "missed": len(entries) - len(times), "seconds": spread(times),
            "median_all_s": median_with_misses([e["time_to_target_s"] for e in entries])}


def by_workload(entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        groups.setdefault(e["name"].split("+")[0], []).append(e)
    return groups


def batch_sweep(w: Workload, device: str, out: Path | None, sizes: list[int],
                extra: list[str] | None = None) -> list[dict[str, Any]]:
    return [run_variant(v, device, out) for v in batch_variants(w, sizes, extra)]


def tradeoff_matrix(w: Workload, device: str, out: Path | None, variants: list[str] | None = None,
                    extra: list[str] | None = None) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Entries for each variant and a matrix {variant: speed, memory, loss, stability, repeatable}."""
    entries = [run_variant(v, device, out) for v in tradeoff_variants(w, variants, extra)]
    return entries, tradeoff_summary(entries)


def time_to_target(w: Workload, device: str, out: Path | None, seeds: int,
                   extra: list[str] | None = None) -> dict[str, Any]:
    """The workload to its fixed target with `seeds` seeds (`entries` holds each run's entry)."""
    entries = [run_variant(v, device, out) for v in ttt_variants(w, seeds, extra)]
    return {**ttt_summary(entries), "entries": entries}
