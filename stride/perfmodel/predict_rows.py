"""Predict every row of a published-results CSV: one JSON-ready dict per row, never an exception."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from stride.config.errors import ConfigError
from stride.perfmodel.costmodel import Prediction, predict
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import Catalog
from stride.perfmodel.published import RowInputs, read_rows, row_inputs

NULL_RESULT = {"iter_time_s": None, "tokens_per_s_per_gpu": None, "mfu": None, "peak_mem_gib": None,
               "fits": None}


def predict_inputs(inputs: RowInputs, eff: Efficiency) -> Prediction:
    """Predict one readable row; `recompute` not stated -> the cheapest mode that fits."""
    assert inputs.spec and inputs.layout and inputs.hardware
    if not inputs.recompute_auto:
        return predict(inputs.spec, inputs.layout, inputs.hardware, inputs.global_batch, eff)
    best = None
    for mode in ("none", "selective", "full"):
        lay = dataclasses.replace(inputs.layout, recompute=mode)
        best = predict(inputs.spec, lay, inputs.hardware, inputs.global_batch, eff)
        if best.fits:
            break
    assert best is not None
    return best


def predict_row(row: dict, catalog: Catalog, eff: Efficiency) -> dict:
    inputs = row_inputs(row, catalog)
    out: dict = {"row_id": inputs.row_id}
    if inputs.reason:
        return {**out, **NULL_RESULT, "reason": inputs.reason}
    try:
        pred = predict_inputs(inputs, eff)
    except (ConfigError, ValueError, ZeroDivisionError) as exc:
        return {**out, **NULL_RESULT, "reason": str(exc)}
    out.update({
        "iter_time_s": pred.step_time_s,
        "tokens_per_s_per_gpu": pred.tokens_per_s_per_device,
        "mfu": pred.mfu,
        "peak_mem_gib": pred.peak_mem_gib,
        "fits": pred.fits,
        "layout": pred.layout.short(),
        "hardware": pred.hardware,
        "breakdown_s": pred.breakdown_s,
    })
    if inputs.notes or inputs.recompute_auto:
        notes = list(inputs.notes)
        if inputs.recompute_auto:
            notes.append(f"recompute not stated: chose {pred.layout.recompute} (cheapest that fits)")
        out["notes"] = notes
    return out


def predict_csv(path: str | Path, catalog: Catalog, eff: Efficiency) -> list[dict]:
    return [predict_row(row, catalog, eff) for row in read_rows(path)]
