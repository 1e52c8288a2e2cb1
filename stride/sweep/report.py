"""The sweep's report: one table of every point, the seed-level significance of every pair of configurations,
plots of the final validation loss against each swept key, and what the sweep cost against one by one.

Written into the sweep directory: `table.parquet` (one row per point, pyarrow), `results.json` (the bench
results schema: one workload entry per point, plus a `sweep` section), `report.html` (self-contained,
inline SVG) and `summary.md`. A configuration is a point's values without its seed keys (`train.seed`,
`data.seed`); its seeds are the samples the statistics use.
"""

from __future__ import annotations

import json
import math
import statistics
from itertools import combinations
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stride.report.svg import spread_chart
from stride.sweep.stats import MORE_SEEDS, diff_interval, holm, welch

SEED_KEYS = ("train.seed", "data.seed")
SUMMARY_COLUMNS = ("status", "steps", "final_train_loss", "final_val_loss", "time_to_target_s", "diverged_at_step",
                   "samples_per_s", "step_time_s", "wall_time_s", "peak_mem_bytes", "params", "config_hash",
                   "params_sha256")


def _cell(v: Any) -> Any:
    """A table cell: numbers and strings as they are, lists and tables as JSON text."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    return json.dumps(v)


def table_rows(results: list[dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        s = r["summary"]
        row = {"point": r["id"], "label": r["label"]}
        row.update({k: _cell(r["values"].get(k)) for k in keys})
        row.update({"mode": r["mode"], "pack": r["pack"]["index"], "pack_size": r["pack"]["size"]})
        row.update({k: _cell(s.get(k)) for k in SUMMARY_COLUMNS})
        row["one_by_one_s"] = _cell(r.get("one_by_one_s"))
        rows.append(row)
    return rows


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(path)


def configurations(results: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Points grouped by their values without the seed keys ("" when only seeds are swept)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        name = " ".join(f"{k}={json.dumps(v)}" for k, v in r["values"].items() if k not in SEED_KEYS)
        out.setdefault(name, []).append(r)
    return out


def _val(r: dict[str, Any]) -> float | None:
    v = r["summary"].get("final_val_loss")
    return v if isinstance(v, int | float) and math.isfinite(v) and r["summary"].get("status") != "diverged" else None


def pairwise(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For every pair of configurations: mean difference of final val loss, Welch's t, df, p (raw and Holm),
    and the 95 % interval of the difference (`ci95`; `ci95_method`: Welch's t interval below
    BOOTSTRAP_MIN_SEEDS seeds a side, whose percentile bootstrap covers far less than 95 %, else the bootstrap);
    `significant` when Holm's p < 0.05 and the interval excludes 0, None (no test, no claim either way) with
    fewer than 2 seeds on a side."""
    confs = {k: [v for v in map(_val, rs) if v is not None] for k, rs in configurations(results).items()}
    pairs = []
    for a, b in combinations(sorted(confs), 2):
        w, ci = welch(confs[a], confs[b]), diff_interval(confs[a], confs[b])
        pairs.append({"a": a, "b": b, "n_a": len(confs[a]), "n_b": len(confs[b]),
                      "mean_a": statistics.fmean(confs[a]) if confs[a] else None,
                      "mean_b": statistics.fmean(confs[b]) if confs[b] else None,
                      "diff": w.diff if w else None, "t": w.t if w else None, "df": w.df if w else None,
                      "p": w.p if w else None, "ci95": list(ci[0]) if ci else None,
                      "ci95_method": ci[1] if ci else None})
    for pair, adj in zip(pairs, holm([p["p"] for p in pairs]), strict=True):
        pair["p_holm"] = adj
        pair["significant"] = None if adj is None else bool(adj < 0.05 and pair["ci95"] and
                                                            (pair["ci95"][0] > 0 or pair["ci95"][1] < 0))
    return pairs


def significance_line(pairs: list[dict[str, Any]]) -> str:
    """How many pairs differ beyond seed noise, claimed only of the pairs whose seed noise is known: with one
    seed a configuration's noise cannot be estimated, and "0 of 1 pairs differ" would read as a tested result."""
    tested = [p for p in pairs if p["significant"] is not None]
    if not pairs:
        return "one configuration: no pairs to compare"
    untested = len(pairs) - len(tested)
    unknown = f"seed noise unknown with fewer than 2 seeds per configuration; add seeds with {MORE_SEEDS}"
    if not tested:
        return f"no claim on which configurations differ: {unknown}"
    line = f"{sum(p['significant'] for p in tested)} of {len(tested)} configuration pairs differ beyond seed noise"
    return line + (f"; {untested} pair(s) not tested: {unknown}" if untested else "")


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _axis(values: list[Any]) -> tuple[dict[str, float], dict[float, str], bool]:
    """x position of each value (by its JSON text), tick labels, and whether the axis is log10: a positive
    numeric key spanning a decade or more (learning rates) is; other numbers are linear; others categorical."""
    texts = sorted({json.dumps(v) for v in values})
    decoded = [json.loads(t) for t in texts]
    if not _numeric(decoded):
        return {t: float(i) for i, t in enumerate(texts)}, {float(i): t for i, t in enumerate(texts)}, False
    log = min(decoded) > 0 and max(decoded) / min(decoded) >= 10
    pos = {t: math.log10(d) if log else float(d) for t, d in zip(texts, decoded, strict=True)}
    return pos, {pos[t]: f"{d:g}" for t, d in zip(texts, decoded, strict=True)}, log


def plots(results: list[dict[str, Any]], keys: list[str]) -> list[str]:
    """Per swept key (seeds aside): final val loss, mean and seed min..max, against the key's values; one
    series per combination of the other keys."""
    charts = []
    for key in (k for k in keys if k not in SEED_KEYS):
        pos, ticks, log = _axis([r["values"][key] for r in results])
        series: dict[str, dict[float, list[float]]] = {}
        for r in results:
            v = _val(r)
            if v is None:
                continue
            other = " ".join(f"{k}={json.dumps(x)}" for k, x in r["values"].items() if k != key and k not in SEED_KEYS)
            series.setdefault(other or "all", {}).setdefault(pos[json.dumps(r["values"][key])], []).append(v)
        spread = {name: [(x, statistics.fmean(ys), min(ys), max(ys)) for x, ys in sorted(pts.items())]
                  for name, pts in series.items()}
        charts.append(spread_chart(spread, f"final val loss vs {key} (mean; whisker: seeds min..max)",
                                   f"log10({key})" if log else key, "final val loss", ticks))
    return charts
