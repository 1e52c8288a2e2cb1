"""Predict every row of a published-results CSV: one JSON-ready dict per row, never an exception.

Each answered row carries the contract's fields (`tokens_per_s_per_gpu`, `iter_time_s`, `mfu`,
`peak_mem_gib`, `fits` and the 80% interval `_lo`/`_hi` of the first two); a refused row has the
same keys as null and a `reason` naming the missing or unreadable input.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

from stride.perfmodel.costmodel import GIB, Prediction, predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import Catalog
from stride.perfmodel.intervals import IntervalTable, apply, load_intervals
from stride.perfmodel.layout import stage_split
from stride.perfmodel.measured import has_measurement
from stride.perfmodel.published import RowInputs, read_rows, row_inputs

_ASSUMPTION = re.compile(r"assumed|not stated|\bblank\b|\bused\b|\bchose\b|no profile|without a dtype")

NULL_RESULT = {"iter_time_s": None, "tokens_per_s_per_gpu": None, "mfu": None, "peak_mem_gib": None, "fits": None,
               "tokens_per_s_per_gpu_lo": None, "tokens_per_s_per_gpu_hi": None, "iter_time_s_lo": None,
               "iter_time_s_hi": None}


def predict_inputs(inputs: RowInputs, eff: Efficiency) -> Prediction:
    """Predict one readable row. What the row does not state is resolved as the run must have been set up,
    since it ran: `recompute` -> the cheapest mode that fits (none, selective, full; no selective in runs
    dated before it was published, published.SELECTIVE_SINCE); `zero_or_fsdp` -> no
    sharding, else the distributed optimizer where only that fits (it costs next to no time, so it comes before
    any recompute). Where nothing fits, the last, most frugal choice is predicted (`fits` false)."""
    assert inputs.spec and inputs.layout and inputs.hardware
    modes = (("none", "selective", "full") if inputs.selective_known else ("none", "full")) \
        if inputs.recompute_auto else (inputs.layout.recompute,)
    stages = (0, 1) if inputs.zero_auto else (inputs.layout.zero,)
    best = None
    for mode in modes:
        for zero in stages:
            lay = dataclasses.replace(inputs.layout, recompute=mode, zero=zero)
            best = _fastest_chunks(inputs, lay, eff)
            if best.fits:
                return best
    assert best is not None
    return best


def _fastest_chunks(inputs: RowInputs, lay, eff: Efficiency) -> Prediction:
    """`lay` predicted; where the row names an interleaved schedule without its chunk count, with the count that
    is fastest among those that fit (a published run was tuned), else the fastest."""
    if not inputs.vpp_choices:
        return predict(inputs.spec, lay, inputs.hardware, inputs.global_batch, eff)
    preds = [predict(inputs.spec, dataclasses.replace(lay, vpp=v, stage_split=stage_split(inputs.spec.layers,
                                                                                          lay.pp, v)),
                     inputs.hardware, inputs.global_batch, eff) for v in inputs.vpp_choices]
    fitting = [p for p in preds if p.fits]
    return min(fitting or preds, key=lambda p: p.step_time_s)


def memory_as_measured(pred: Prediction, kind: str) -> float:
    """Predicted peak in GiB as the row's memory figure counts it (allocated, reserved or device)."""
    b = {"allocated": pred.allocated_bytes, "reserved": pred.reserved_bytes}.get(kind, pred.peak_mem_bytes)
    return b / GIB


def predict_row(row: dict, catalog: Catalog, eff: Efficiency, table: IntervalTable | None = None) -> dict:
    """One row's prediction, or its refusal; catches everything (a bad row never stops the file)."""
    rid = str((row or {}).get("row_id") or "").strip() or "?"
    try:
        return _predict_row(row, catalog, eff, table or IntervalTable())
    except Exception as exc:  # noqa: BLE001 - the contract: one object per row, never an exception
        return {"row_id": rid, **NULL_RESULT, "reason": f"internal error on this row: {type(exc).__name__}: {exc}"}


def _predict_row(row: dict, catalog: Catalog, eff: Efficiency, table: IntervalTable) -> dict:
    inputs = row_inputs(row, catalog)
    out: dict = {"row_id": inputs.row_id}
    if inputs.reason:
        return {**out, **NULL_RESULT, "reason": inputs.reason}
    try:
        pred = predict_inputs(inputs, eff)
    except (ValueError, ZeroDivisionError, OverflowError, KeyError) as exc:
        return {**out, **NULL_RESULT, "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - ConfigError and anything else: refused, named
        return {**out, **NULL_RESULT, "reason": str(exc)}
    if not (math.isfinite(pred.step_time_s) and pred.step_time_s > 0):
        return {**out, **NULL_RESULT, "reason": "the inputs give no finite step time"}
    q10, q90, basis = table.bounds(inputs.kind)
    memory = memory_as_measured(pred, inputs.memory_kind)
    mem_factors = table.memory_factors()
    if mem_factors is not None:  # the 80% interval of the peak from the held-out memory error
        out.update({"peak_mem_gib_lo": memory * mem_factors[0], "peak_mem_gib_hi": memory * mem_factors[1]})
    out.update({
        "tokens_per_s_per_gpu": pred.tokens_per_s_per_device,
        "iter_time_s": pred.step_time_s,
        "mfu": pred.mfu,
        "peak_mem_gib": memory,
        "fits": pred.fits,
        **apply(pred.tokens_per_s_per_device, pred.step_time_s, q10, q90),
        "interval_basis": basis,
        "memory_kind": inputs.memory_kind,
        "device_mem_gib": pred.peak_mem_gib,
        "layout": pred.layout.short(),
        "framework": pred.layout.framework,
        "hardware": pred.hardware,
        "breakdown_s": pred.breakdown_s,
    })
    notes = list(inputs.notes)
    if inputs.recompute_auto:
        notes.append(f"recompute not stated: chose {pred.layout.recompute} (cheapest that fits)")
    if inputs.vpp_choices:
        notes.append(f"interleaved schedule without its chunk count: chose {pred.layout.vpp} chunks a rank (the "
                     f"fastest{' that fits' if pred.fits else ''} of {', '.join(map(str, inputs.vpp_choices))})")
    if inputs.zero_auto:
        notes.append("zero_or_fsdp not stated: chose " + ("the distributed optimizer (ZeRO-1: plain data parallelism "
                                                          "does not fit)" if pred.layout.zero else
                                                          "plain data parallelism (it fits)"))
    # what the row did not say and the model filled in (each moves the answer by less than ~10%, else the row
    # would be refused naming it), apart from what the row's text changed
    out.update(_against_measured(row, inputs, pred))
    out["assumed"] = [n for n in notes if _ASSUMPTION.search(n)]
    rest = [n for n in notes if not _ASSUMPTION.search(n)]
    if rest:
        out["notes"] = rest
    return out


def _against_measured(row: dict, inputs: RowInputs, pred: Prediction) -> dict:
    """Where the row carries a measurement: its tokens/s per device (by the row's FLOP convention, as the
    held-out judge reads it) and the prediction's error against it, so a user's own runs show how far off the
    model is; {} where the row has none or it cannot be converted."""
    if not has_measurement(row):
        return {}
    meas, how = inputs.measured(row)
    if not meas:
        return {"measured_note": how}
    return {"measured_tokens_per_s_per_gpu": meas, "error_pct": (pred.tokens_per_s_per_device / meas - 1) * 100,
            "measured_from": how}


def predict_csv(path: str | Path, catalog: Catalog, eff: Efficiency, table: IntervalTable | None = None) -> list[dict]:
    table = table or load_intervals()
    out, seen = [], {}
    for i, row in enumerate(read_rows(path)):
        res = predict_row(row, catalog, eff, table)
        rid = res.get("row_id")
        if rid in seen and rid != "?":  # a repeated id is named: results are looked up by it
            res.setdefault("notes", []).append(f"row_id {rid!r} repeats row {seen[rid] + 1} of the file")
        seen.setdefault(rid, i)
        out.append(res)
    return out
