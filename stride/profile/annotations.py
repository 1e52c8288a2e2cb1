"""User annotations (`record_function`, e.g. `## forward ##`): time per label, and data-loading spans."""

from __future__ import annotations

import numpy as np

from stride.profile import intervals as iv
from stride.profile.activity import data_annotation_mask
from stride.profile.classify import ANNOTATION_CATS, annotation_label, is_host_comm, step_number
from stride.profile.trace_model import RankTrace
from stride.profile.windows import Window


def _annotation_mask(t: RankTrace) -> np.ndarray:
    return np.isin(t.host_cat, t.cat_ids(ANNOTATION_CATS))


def data_spans(t: RankTrace) -> iv.Intervals:
    """Union of host annotations that load data (`## data_load ##`, `enumerate(DataLoader)...`, `stride.data`; by
    whole words, `classify.is_data_annotation`: not `DistributedDataParallel.forward`)."""
    m = data_annotation_mask(t)
    return iv.union(t.host_ts[m], t.host_ts[m] + t.host_dur[m])


def annotation_breakdown(t: RankTrace, windows: list[Window], k: int = 12) -> list[dict]:
    """Per label: count of instances, total µs (the union of its instances, clipped to the host steps: never more
    than the steps) and share of the steps' host time."""
    m = _annotation_mask(t)
    if not m.any() or not windows:
        return []
    if t.steps:
        listed = {w.step for w in windows}  # once, not per step: quadratic in the steps of a long trace
        bounds = [(s.ts, s.end) for s in t.steps if s.number in listed]
    else:
        bounds = [(w.start, w.end) for w in windows]
    host_span = sum(e - s for s, e in bounds)
    spans: dict[str, tuple[list[float], list[float]]] = {}
    ts, end, names = t.host_ts[m], t.host_ts[m] + t.host_dur[m], t.host_name[m]
    for lo, hi in bounds:
        sel = (ts >= lo) & (ts < hi)
        for a, b, n in zip(ts[sel], end[sel], names[sel], strict=True):
            name = t.names[int(n)]
            if step_number(name) is not None or is_host_comm(name):
                continue
            starts, ends = spans.setdefault(annotation_label(name), ([], []))
            starts.append(float(a))
            ends.append(float(min(b, hi)))
    # a label's time is the union of its instances: one nested in another of the same label (HTA's cupti_profiler
    # sample, `[param|...|warmup|forward]` inside itself) was summed with it, 116.6% of the step
    totals = {n: (len(s), iv.length(iv.union(np.array(s), np.array(e)))) for n, (s, e) in spans.items()}
    rows = sorted(totals.items(), key=lambda kv: -kv[1][1])[:k]
    return [
        {"name": n, "count": int(c), "total_us": tot, "pct_of_step": 100.0 * tot / host_span if host_span > 0 else None}
        for n, (c, tot) in rows
    ]
