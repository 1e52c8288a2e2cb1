"""`stride plan --workload NAME|config.toml`: trace a stride workload, then rank the layouts the
trainer can run for it on N devices (data parallel: DDP or FSDP2, micro-batch, checkpointing)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stride.config.errors import ConfigError, suggest
from stride.config.schema import RunConfig
from stride.perfmodel.census import WorkloadCensus
from stride.perfmodel.census_workload import workload_census
from stride.perfmodel.costmodel import Prediction
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import Hardware
from stride.perfmodel.layout import Layout
from stride.perfmodel.planner import PlanResult, _ties_by_memory
from stride.perfmodel.workload_cost import interpolate, predict_workload


def workload_config(spec: str, overrides: list[str] | None = None) -> tuple[str, RunConfig]:
    """(name, config) of a bench workload name (stride.bench.workloads) or a run config TOML."""
    from stride.bench.workloads import WORKLOADS
    from stride.config import load_config

    overrides = list(overrides or [])
    if spec.endswith(".toml") or Path(spec).is_file():
        return Path(spec).stem, load_config(spec, overrides)
    w = WORKLOADS.get(spec)
    if w is None:
        raise ConfigError(f"--workload: `{spec}` is neither a config file nor a bench workload"
                          f"{suggest(spec, list(WORKLOADS))}; workloads: {', '.join(WORKLOADS)}")
    if w.kind != "supervised":
        raise ConfigError(f"--workload: `{spec}` is a {w.kind} workload (rollouts, not one model step): not traced")
    return spec, load_config(overrides=[*w.overrides, *overrides])


def _sizes(per_rank: int) -> list[int]:
    """Micro-batch sizes to consider: powers of two dividing the per-rank batch, and the batch itself."""
    out = {per_rank}
    s = 1
    while s < per_rank:
        if per_rank % s == 0:
            out.add(s)
        s *= 2
    return sorted(out)


@dataclass
class WorkloadPlan:
    name: str
    config: RunConfig
    traces: dict[int, WorkloadCensus]
    result: PlanResult
    global_batch: int


def traces_at(cfg: RunConfig, sizes: list[int], name: str) -> dict[int, WorkloadCensus]:
    """Direct traces at the smallest and largest size, interpolated between (affine in batch)."""
    lo, hi = min(sizes), max(sizes)
    ends = {lo: workload_census(cfg, lo, name)}
    if hi != lo:
        ends[hi] = workload_census(cfg, hi, name)
    return {s: ends[s] if s in ends else interpolate(ends[lo], ends[hi], s) for s in sizes}


def search_workload(spec: str, hw: Hardware, devices: int, global_batch: int | None = None,
                    eff: Efficiency | None = None, overrides: list[str] | None = None) -> WorkloadPlan:
    if devices < 1:
        raise ConfigError(f"--devices must be >= 1, got {devices}")
    name, cfg = workload_config(spec, overrides)
    gb = global_batch if global_batch is not None else cfg.train.batch_size
    if gb % devices:
        raise ConfigError(f"global batch {gb} is not divisible by {devices} devices: pick --global-batch")
    per_rank = gb // devices
    sizes = _sizes(per_rank)
    traces = traces_at(cfg, sizes, name)
    has_blocks = bool(traces[sizes[0]].blocks())
    p = cfg.parallel
    fsdp_bytes = 2 if p.mp_param_dtype in ("bf16", "fp16") else 4
    preds: list[Prediction] = []
    for mb in sizes:
        tr = traces[mb]
        for zero in ((0, 3, 2) if devices > 1 else (0,)):
            for rc in (("none", "full") if has_blocks else ("none",)):
                # stride's own trainer: DDP without sharding, FSDP2 with it (the label `--json` reports)
                lay = Layout(dp=devices, zero=zero, micro_batch=mb, recompute=rc, precision=tr.precision,
                             framework="fsdp2" if zero else "ddp")
                preds.append(predict_workload(tr, lay, hw, gb, eff, p.ddp_bucket_mb, fsdp_bytes))
    # the model plan's rule, which the table's title states: step times within 0.5 % are one speed, the smaller
    # memory first (this search had sorted by time alone under that title: planner audit of 2026-12-07)
    fits = _ties_by_memory(sorted((x for x in preds if x.fits), key=lambda x: x.step_time_s))
    over = sorted((x for x in preds if not x.fits), key=lambda x: x.step_time_s)
    return WorkloadPlan(name, cfg, traces, PlanResult(fits, over, len(preds)), gb)


def describe(lay: Layout) -> str:
    """A layout in the trainer's own terms (the config keys that select it)."""
    from stride.perfmodel.workload_cost import WORKLOAD_ZERO

    parts = [f"{lay.dp} rank(s)"]
    if lay.dp > 1:
        parts.append(WORKLOAD_ZERO[lay.zero])
    parts.append(f"micro-batch {lay.micro_batch}")
    if lay.recompute == "full":
        parts.append("AC full")
    return ", ".join(parts)


def settings(lay: Layout, global_batch: int) -> list[str]:
    """`--set` overrides that make `stride train` run this layout."""
    out = [f"train.batch_size={global_batch}", f"train.grad_accum={global_batch // (lay.dp * lay.micro_batch)}",
           f"train.activation_checkpointing={lay.recompute}"]
    if lay.dp > 1 and lay.zero >= 2:
        out.append(f"parallel.dp_shard={lay.dp}")
        out.append(f"parallel.reshard_after_forward={'true' if lay.zero == 3 else 'false'}")
    return out
