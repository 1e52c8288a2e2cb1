"""Turn benchmark figures into advice: each workload's bottleneck, the fastest variant, and cost.

Thresholds are shares of the step's wall time from the trainer's own breakdown: rules of thumb that
say where to look first, stated in every recommendation so a reader can judge them.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from stride.files.input_file import InputFileError, InputFileMissing, read_input_text
from stride.metrics.contention import entry_contention, entry_waiting_threads
from stride.metrics.dtype_speed import DtypeSpeeds, host_speeds, precision_line

DATA_BOUND = 0.10  # data wait above 10 % of the step: the loader is on the critical path
# PPO's rollout (policy inference and environment steps, no grad) above 25 % of an update: the environment, as data
# for a supervised step, is what the update waits on (outside audit 13, L3: a 51 % rollout read "forward and backward
# fill the step")
ROLLOUT_BOUND = 0.25
COMM_BOUND = 0.15  # exposed communication (DDP backward waiting on its all-reduce) above 15 % of the step
OPTIMIZER_BOUND = 0.25
HOST_BOUND = 0.15  # unattributed time ("other"): Python, logging, launch overhead
LOW_MFU = 0.2  # forward + backward at under 20 % MFU: kernel count or memory traffic, not FLOPs, set the pace
MFU_NEEDS = 0.5  # MFU speaks of forward + backward only where they are at least half the step
# The default price table ships inside the package (package data), so `stride report` finds it from any
# directory and in a pip-installed stride; it was `configs/prices.toml` relative to the current directory.
DEFAULT_PRICES = Path(__file__).with_name("prices.toml")
PRICES_MAX_BYTES = 1 << 20  # a table of device prices is a few hundred bytes


def load_prices(path: str | Path | None = None) -> dict[str, float]:
    """USD per device-hour from the TOML table at `path` (None: the table shipped with stride).

    Nothing there: FileNotFoundError. A FIFO, a device or a directory (read through `read_input_text`: refused
    naming what it is, never opened or read forever; `is_file()` called a FIFO "not found"), a file over
    PRICES_MAX_BYTES, text that is not UTF-8 TOML or not a table of prices: ValueError, its `__cause__` the
    InputFileError where there is one."""
    p = Path(path) if path is not None else DEFAULT_PRICES
    try:
        text = read_input_text(p, limit=PRICES_MAX_BYTES, what="prices file")
    except InputFileMissing:
        raise FileNotFoundError(f"price table not found: {p}") from None
    except InputFileError as exc:
        raise ValueError(str(exc)) from exc
    try:
        prices = tomllib.loads(text).get("prices")
    except ValueError as exc:  # TOMLDecodeError, and an integer over 4300 digits (its message named no file)
        raise ValueError(f"{p}: not valid TOML: {exc}") from None
    except RecursionError:  # arrays or tables nested thousands deep: a traceback from tomllib (audit 14, L4)
        raise ValueError(f"{p}: not valid TOML: nested too deeply to read") from None
    if not isinstance(prices, dict) or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                               for v in prices.values()):
        raise ValueError(f"{p}: expected a [prices] table of numbers (USD per device-hour)")
    bad = next((k for k, v in prices.items() if not (math.isfinite(v) and v >= 0)), None)
    if bad is not None:  # a NaN or negative price printed "Cost: -6.99 USD per million samples"
        raise ValueError(f"{p}: prices.{bad} = {prices[bad]} is not a price (a finite number >= 0, USD per "
                         "device-hour)")
    return {k: float(v) for k, v in prices.items()}


def _names_part(key: str, gpu: str) -> bool:
    """Whether price key `key` names the part in device name `gpu`: the key as whole tokens, any case ("H100" in
    "NVIDIA H100 80GB HBM3"), never inside a longer model number ("L4" is not the "L40S", "H200" not the "GH200")."""
    return re.search(rf"(?<![a-z0-9]){re.escape(key.lower())}(?![a-z0-9])", gpu.lower()) is not None


def price_for(env: dict[str, Any], prices: dict[str, float], devices: int | None = None) -> tuple[float | None, str]:
    """USD an hour for the devices a run used (one GPU's price times `devices`, or the CPU host's) and the key it came
    from. `devices`: the GPUs the run ran on (`run_devices`); None: every GPU env.json lists. The longest key that
    names the GPU wins: a plain substring test took the first key in the file, so an L40S was priced as an L4 and a
    GH200 as an H200 (planner audit of 2026-12-07)."""
    keys = sorted((k for k in prices if k != "cpu"), key=len, reverse=True)
    for gpu in env.get("gpus") or []:
        for key in keys:
            if _names_part(key, str(gpu)):
                return prices[key] * (devices if devices is not None else len(env["gpus"])), key
    if not env.get("gpus") and "cpu" in prices:
        return prices["cpu"], "cpu"
    return None, "no price"


def run_devices(entry: dict[str, Any], env: dict[str, Any]) -> int | None:
    """The GPUs a results entry ran on: its world size (one GPU a rank, every node's counted), or 1 where it records
    none (a `stride bench` workload trains in the bench's own process); None on a host without GPUs, whose price is
    the whole machine's. env.json lists the GPUs of rank 0's host, used or not: a one-process run on an 8-GPU node
    was priced at 8 GPUs, and a 16-rank run over two such nodes at 8 (outside review of the report's cost)."""
    if not env.get("gpus"):
        return None
    n = entry.get("world_size")
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1


def seconds_lost(entry: dict[str, Any]) -> float:
    """Training seconds a run paid for twice: what killed processes trained past their last checkpoint
    (summary.json's `lost_time_s`, a lower bound), outside the training clock `time_to_target_s` is on; 0 unknown."""
    lost = entry.get("lost_time_s")
    return float(lost) if isinstance(lost, int | float) and not isinstance(lost, bool) and lost > 0 else 0.0


def pct(fraction: float) -> str:
    """A share as a percentage a reader can tell from zero: whole numbers from 10%, one decimal under
    (an MFU of 0.46% read "0%" beside a table that said 0.5%)."""
    v = 100 * fraction
    return f"{v:.0f}%" if v >= 9.95 else f"{v:.1f}%" if v >= 0.05 else f"{v:.2g}%"


def cost_unit(throughput_unit: str) -> str:
    """What a cost per million is of: the throughput's unit without "/s" ("tokens/s": tokens). The cost is computed
    from that throughput, so a tokens/s workload's figure is per million tokens (outside audit 13, L1: it was labelled
    "per million samples", 128x off for 128-token sequences)."""
    return throughput_unit.removesuffix("/s").strip() or "samples"


def bottleneck(w: dict[str, Any], precision: str | None = None) -> tuple[str, str]:
    """(kind, advice) of one workload entry; `precision` is the lower-precision advice that the
    measurements allow (see `precision_evidence`), None where none measured faster."""
    if entry_contention(w):  # a starved run's phase shares are of the host, not the model (audit 21, H1: the contention
        # was diagnosed as an optimizer bottleneck, "compile the optimizer step"); a train run's entry carries it too
        waiting = entry_waiting_threads(w)
        many = f"{waiting:.2f} threads on average" if waiting is not None else "its threads"
        return "contended host", (f"the run's threads waited for cores ({many}): its phase shares and rates are of "
                                  "a contended host, not of the workload; rerun on a quiet host (or with fewer "
                                  "train.threads) before acting on a bottleneck")
    b = w["step_time_breakdown_s"]
    total = sum(b.values()) or 1.0
    share = {k: v / total for k, v in b.items()}
    if share.get("data", 0) > DATA_BOUND:
        return "data", (f"data wait is {100 * share['data']:.0f}% of the step (> {100 * DATA_BOUND:.0f}%): "
                        "prefetch in the background, gather whole batches, use pinned memory")
    if share.get("rollout", 0) > ROLLOUT_BOUND:
        return "environment", (f"the rollout (policy inference and environment steps, no grad) is "
                               f"{pct(share['rollout'])} of the update (> {100 * ROLLOUT_BOUND:.0f}%): step more "
                               "environments at once (a wider batch per policy call), keep the environment on the "
                               "device, or reuse each rollout for more epochs / minibatches")
    # The summary's exposed communication (DDP: backward waiting on the gradient all-reduce, inside "backward"; no
    # breakdown has a phase of its own for it: the rule read share["communication"] and never fired, outside audit 13,
    # M2). A bench entry copies it from the run's summary.
    comm = w.get("exposed_comm_fraction")
    cost = w.get("comm_cost_fraction")  # with the "hidden" part, where no core was free for it (CPU)
    if isinstance(cost, int | float) and w.get("comm_core_free") is False and cost > COMM_BOUND:
        shown = pct(comm if isinstance(comm, int | float) else 0.0)
        return "communication", (f"communication costs {pct(cost)} of the step (> {100 * COMM_BOUND:.0f}%; exposed "
                                 f"{shown}, the rest overlapped compute on cores it had to share: gloo's thread had no "
                                 "core of its own): accumulate gradients "
                                 "and sync once per N micro-batches (train.grad_accum), or leave a core per rank for "
                                 "the collectives (fewer train.threads or ranks per host)")
    if isinstance(comm, int | float) and comm > COMM_BOUND:
        return "communication", (f"exposed communication is {pct(comm)} of the step (> {100 * COMM_BOUND:.0f}%; "
                                 "backward waiting on the gradient all-reduce): smaller DDP buckets overlap more of it "
                                 "with backward, a bf16 comm hook halves it, a larger per-rank batch amortises it")
    if share.get("optimizer", 0) > OPTIMIZER_BOUND:
        # advice does not offer what the run already has: its optimizer's implementation, its compile setting
        impl = w.get("optimizer_impl")
        compiled = "optimizer" in str(((w.get("config") or {}).get("train") or {}).get("compile") or "")
        has = [f"already {impl}"] if impl in ("fused", "triton") else []
        has += ["compiled"] if compiled else []
        offer = ([] if has else ["use fused AdamW"]) + ([] if compiled else
                                                         ["compile the optimizer step (train.compile=model+optimizer)"])
        *first, last = [*offer, "a larger batch per step"]
        return "optimizer", (f"the optimizer is {pct(share['optimizer'])} of the step"
                             + (f" ({', '.join(has)})" if has else "") + ": "
                             + (f"{', '.join(first)} or {last}" if first else last))
    if share.get("other", 0) > HOST_BOUND:
        return "host", (f"{100 * share['other']:.0f}% of the step is host overhead outside forward/backward: "
                        "enable torch.compile, log less often, raise the batch size")
    also = f"; {precision}" if precision else ""  # "use bf16 ..." / "keep fp32: ..." / "bf16 may help ..."
    fwd_bwd = share.get("forward", 0) + share.get("backward", 0)
    if b and fwd_bwd < MFU_NEEDS:
        # No rule above fired, yet forward and backward do not fill the step: MFU, a figure of the whole step, says
        # nothing of them then; name where the time went instead.
        rest = sorted(((v, k) for k, v in share.items() if k not in ("forward", "backward") and v >= 0.01),
                      reverse=True)
        where = ", ".join(f"{k} {pct(v)}" for v, k in rest) or "nothing else above 1%"
        return "no single phase", (f"forward and backward are {pct(fwd_bwd)} of the step (< "
                                   f"{100 * MFU_NEEDS:.0f}%), and no phase crosses its threshold ({where}): "
                                   "`stride profile` shows where the rest goes")
    mfu = w.get("mfu")
    if mfu is not None and mfu < LOW_MFU:
        # Forward and backward fill the step, yet the FLOPs run far below the peak: what limits it is
        # the number of kernels (launch / dispatch overhead per small op) or memory traffic, not
        # arithmetic, so fewer, fused kernels help and a faster matmul dtype alone does not.
        return "overhead (low MFU)", (f"forward and backward fill the step at only {pct(mfu)} MFU (< "
                                      f"{100 * LOW_MFU:.0f}%): many small kernels or memory traffic, not "
                                      "arithmetic, set the pace; fuse them with torch.compile "
                                      "(train.compile=model+optimizer; CUDA graphs on a GPU), raise the batch "
                                      f"size or model width; `stride profile` shows the op mix{also}")
    return "compute", f"compute-bound: already spending the step in forward and backward{also}"


def precision_evidence(results: dict[str, Any], ws: list[dict[str, Any]], speeds: DtypeSpeeds | None) -> str | None:
    """The precision line for one workload group. The group's own variants in another precision (the
    tradeoff sweep's bf16/fp16) are the workload's measurement and decide; otherwise `speeds`, this
    host's matmul probe when the results come from this host; a GPU without either, the datasheets."""
    base = next((w for w in ws if "+" not in w["name"]), ws[0])
    current = (base.get("config") or {}).get("train", {}).get("precision", "fp32")
    measured = {current: base["throughput"]["median"] or 0.0}
    for w in ws:
        p = (w.get("config") or {}).get("train", {}).get("precision")
        if p and p != current and w["throughput"]["median"] is not None:
            measured[p] = max(measured.get(p, 0.0), w["throughput"]["median"])
    if len(measured) > 1 and current == "fp32":
        speeds = DtypeSpeeds(measured, "workload")
    device = "gpu" if (results.get("environment") or {}).get("gpus") else "cpu"
    return precision_line(device, current, speeds)


def _host_speeds(env: dict[str, Any]) -> DtypeSpeeds | None:
    """This host's dtype probe, if the results were measured here (same host and CPU) on a CPU."""
    import platform

    from stride.metrics.env import cpu_model

    if env.get("gpus") or env.get("hostname") != platform.node() or env.get("cpu_model") != cpu_model():
        return None
    threads = env.get("torch_threads")  # env.json's word: a count this host can run, else the current count
    # (a float or -7 was torch's RuntimeError from set_num_threads, 10**6 a million threads for the probe)
    ok = type(threads) is int and 1 <= threads <= (os.cpu_count() or 1)
    return host_speeds(threads if ok else None)


SEED = re.compile(r"seed\d+")  # a `--sweep ttt` entry: the workload + "+seed<k>"


def seed_group(ws: list[dict[str, Any]]) -> bool:
    """Whether a workload group is seeds of one configuration (a `--sweep ttt`), not configurations to choose from."""
    return len(ws) > 1 and all(SEED.fullmatch(w["name"].partition("+")[2]) for w in ws)


def ttt_groups(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{workload: `ttt_summary` of its seeds} for every seed group with a target: the results.json
    `time_to_target` section, recomputed from the entries (the section is not checked when read; the entries are)."""
    from stride.bench.sweeps import ttt_summary

    out = {}
    for base, ws in _groups(results).items():
        if seed_group(ws) and any(w.get("target_val_loss") is not None for w in ws):
            out[base] = ttt_summary(ws)
    return out


def _groups(results: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for w in results["workloads"]:
        groups.setdefault(w["name"].split("+")[0], []).append(w)
    return groups


def not_alternatives(results: dict[str, Any]) -> dict[str, str]:
    """{entry name: why it is not ranked as a configuration of its workload}: a world-sweep point with more ranks
    than cores (its figures are of time-shared cores), and a weak-scaling point, whose global batch is N times the
    baseline's: another workload (N times the samples a step), not another way to run the baseline's. The report
    recommended `weak n4` on 2 cores as the fastest configuration and priced it."""
    points = (results.get("scaling") or {}).get("points") or []
    base_batch = {p["workload"]: p.get("global_batch") for p in points if p["scaling"] == "baseline"}
    out = {}
    for p in points:
        name = p.get("entry")
        if not isinstance(name, str) or p["scaling"] == "baseline":
            continue
        why = []
        if p.get("oversubscribed"):
            why.append(f"oversubscribed: {p['world_size']} ranks on {p.get('cores')} cores")
        b = base_batch.get(p["workload"])
        if p["scaling"] == "weak" and b is not None and p.get("global_batch") != b:
            why.append(f"weak scaling: global batch {p.get('global_batch')}, not the baseline's {b}: another workload")
        if why:
            out[name] = "; ".join(why)
    return out


def recommend(results: dict[str, Any], prices: dict[str, float],
              speeds: DtypeSpeeds | None | str = "host") -> list[dict[str, Any]]:
    """One recommendation per workload group. `speeds`: the dtype speeds measured on the machine the
    results come from; "host" (default) measures this host's when the results were made here.

    A group of seeds (a `--sweep ttt`) is one configuration: its figures are the median seed's and the median over
    the seeds, and its run to target is priced at the median over every seed with a miss counted as never (the
    fastest seed's 8.9 s was priced while a third of the seeds never reached the target). A group of configurations
    ranks only the alternatives of one workload (`not_alternatives`)."""
    import statistics

    env = results.get("environment", {})
    if speeds == "host":
        speeds = _host_speeds(env)
    skip = not_alternatives(results)
    ttts = ttt_groups(results)
    out = []
    for base, ws in _groups(results).items():
        seeds = seed_group(ws)
        ranked = ws if seeds else [w for w in ws if w["name"] not in skip] or ws
        left_out = {} if seeds or ranked is ws else {w["name"]: skip[w["name"]] for w in ws if w["name"] in skip}
        if seeds:  # the median seed's figures stand for the configuration's (lower median, as a world point's)
            order = sorted(ws, key=lambda w: w["throughput"]["median"] or 0.0)
            best = order[(len(order) - 1) // 2]
            measured = [w["throughput"]["median"] for w in ws if w["throughput"]["median"] is not None]
            tput = statistics.median(measured) if measured else 0.0
        else:
            best = max(ranked, key=lambda w: w["throughput"]["median"] or 0.0)
            tput = best["throughput"]["median"] or 0.0  # the whole run's (every rank's samples), not one device's
        kind, advice = bottleneck(best, precision_evidence(results, ws, speeds))
        summary = ttts.get(base)
        target = best.get("target_val_loss")
        ttt_note = None
        if summary is not None:
            ttt = summary["median_all_s"]
            missed, runs = summary["missed"], summary["runs"]
            goal = "?" if summary["target_val_loss"] is None else format(summary["target_val_loss"], "g")
            ttt_note = (f"median over {runs} seeds, a miss counted as never; {missed} of {runs} missed" if ttt
                        else f"not computed: {missed} of {runs} seeds missed the target (val loss {goal}), so the "
                             "median over the seeds, a miss counted as never, is not reached")
        else:
            ttt = best.get("time_to_target_s")
            if ttt is None and target is not None:
                hit = [w["name"] for w in ranked if w is not best and w.get("time_to_target_s") is not None]
                ttt_note = (f"not computed: {best['name']} missed the target (val loss {target:g})"
                            + (f"; {len(hit)} other configuration(s) reached it ({', '.join(hit)})" if hit else ""))
        devices = run_devices(best, env)
        price, price_key = price_for(env, prices, devices)  # USD an hour for every device the run used
        lost = seconds_lost(best)
        out.append({
            "workload": base,
            "fastest": best["name"],
            "seeds": len(ws) if seeds else None,  # a seed group: one configuration, not "fastest of N"
            "configurations": 1 if seeds else len(ranked),  # 1: nothing to choose from, not called fastest
            "not_ranked": left_out,  # {entry: why}: not an alternative of this workload
            "throughput": tput,
            "throughput_range": ((min(measured), max(measured)) if seeds and measured else None),
            "unit": best["throughput"]["unit"],
            "bottleneck": kind,
            "advice": advice,
            # per million of the throughput's own unit (samples, tokens, env steps): `cost_unit`
            "usd_per_million_samples": price / 3600 / tput * 1e6 if price is not None and tput else None,
            "cost_unit": cost_unit(best["throughput"]["unit"]),
            # the training clock to the target, plus the seconds restarts trained again (paid for, off that clock)
            "usd_per_run_to_target": price * (ttt + lost) / 3600 if price is not None and ttt else None,
            "time_to_target_s": ttt,
            "to_target_note": ttt_note,  # how the time to target was taken, or why there is no cost to target
            "price_key": price_key,
            "usd_per_hour": price,  # every device the run used (0: the table's price is 0, the cost not counted)
            "devices_priced": devices,  # GPUs (None: the CPU host, priced whole)
            "lost_time_s": lost,
        })
    return out


SCALES_WELL = 0.85  # issue 4's goal for DDP weak scaling at 2 ranks
CONTENTION = 1.15  # forward (no communication under DDP) 15 % slower per sample than on one rank
BUSY = 0.20  # ranks waited for a core more than 20 % of their runnable time: other processes


def scaling_advice(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One verdict per scaling point (N > 1): oversubscribed, busy machine, scales, communication,
    contention or overhead (the first that applies)."""
    out = []
    points = (results.get("scaling") or {}).get("points", [])
    repeats = (results.get("scaling") or {}).get("repeats")
    base_wait = {p["workload"]: p.get("runqueue_wait_share") for p in points if p["scaling"] == "baseline"}
    for p in points:
        eff = p.get("efficiency")
        if p["scaling"] == "baseline" or eff is None:
            continue
        comm, fwd, n = p.get("exposed_comm_fraction"), p.get("forward_time_per_sample_ratio"), p["world_size"]
        wait = max((w for w in (p.get("runqueue_wait_share"), base_wait.get(p["workload"])) if w is not None),
                   default=None)
        if p["oversubscribed"]:
            kind, why = "oversubscribed", (f"{n} ranks on {p.get('cores')} cores time-share them: the efficiency "
                                           "describes this machine, not the code; measure with a core per rank")
        elif wait is not None and wait > BUSY:
            kind, why = "busy machine", (f"ranks waited for a core {100 * wait:.0f}% of the time they were ready to "
                                         f"run (> {100 * BUSY:.0f}%): other processes held the cores, so this "
                                         "efficiency measures the machine's load more than the code; rerun on a "
                                         "quiet machine, with --repeats")
        elif eff > 1:  # above ideal: a measurement effect to rule out before it is read as code that scales
            runs = len([e for e in p.get("efficiency_rounds") or [] if e is not None]) or repeats or 1
            kind, why = "scales", (f"efficiency {eff:.2f} >= {SCALES_WELL}, but above 1 (superlinear): "
                                   f"{'one run' if runs == 1 else f'{runs} runs'} per point, so noise between runs, "
                                   "or a per-rank batch that fits the caches better than one rank's whole batch; "
                                   "rerun with --repeats before reading it as more than ideal scaling")
        elif eff >= SCALES_WELL:
            kind, why = "scales", f"efficiency {eff:.2f} >= {SCALES_WELL}"
        elif comm is not None and comm > COMM_BOUND:
            kind, why = "communication", (f"exposed communication is {100 * comm:.0f}% of the step "
                                          f"(> {100 * COMM_BOUND:.0f}%): smaller DDP buckets overlap more of it with "
                                          "backward, a bf16 comm hook halves it, a larger per-rank batch amortises it")
        elif p["strategy"] == "ddp" and fwd is not None and fwd > CONTENTION:
            kind, why = "contention", (f"forward, which carries no gradient communication under DDP, takes "
                                       f"{fwd:.2f}x one rank's time per sample: the ranks compete for cores, caches "
                                       "or memory bandwidth (or with other processes), or wait for each other in "
                                       "DDP's pre-forward buffer broadcast (models with buffers); that part of the "
                                       "gap is not the gradient all-reduce")
        elif p["strategy"] == "fsdp":
            kind, why = "communication (FSDP)", ("FSDP gathers parameters in forward and reduce-scatters gradients "
                                                 "in backward, not timed apart: try reshard_after_forward=false "
                                                 "(ZeRO-2) or DDP when the model fits on one rank")
        else:
            kind, why = "overhead", ("per-step costs that do not shrink with the per-rank batch (launch, optimizer, "
                                     "Python): a larger batch per rank or torch.compile")
        out.append({"workload": p["workload"], "strategy": p["strategy"], "scaling": p["scaling"], "world_size": n,
                    "efficiency": eff, "verdict": kind, "advice": why})
    return out
