"""Compare two results.json files workload by workload, against each run's own noise."""

from __future__ import annotations

from typing import Any


def noise_band(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Relative change that run-to-run noise can explain: twice the larger CV, at least 2 %."""
    return max(2 * (a.get("cv") or 0.0), 2 * (b.get("cv") or 0.0), 0.02)


def judge(a: dict[str, Any], b: dict[str, Any]) -> tuple[float | None, str]:
    """(ratio b/a of median throughput, verdict) where verdict is faster / slower / within noise."""
    if not a.get("median") or not b.get("median"):
        return None, "n/a"
    ratio = b["median"] / a["median"]
    band = noise_band(a, b)
    overlap = (a.get("min") is not None and b.get("min") is not None
               and a["min"] <= b["max"] and b["min"] <= a["max"])
    if abs(ratio - 1) <= band or overlap:
        return ratio, "within noise"
    return ratio, "faster" if ratio > 1 else "slower"


def compare_results(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    by_name = {w["name"]: w for w in b["workloads"]}
    rows = []
    for wa in a["workloads"]:
        wb = by_name.get(wa["name"])
        if wb is None:
            rows.append({"name": wa["name"], "ratio": None, "verdict": "missing in B"})
            continue
        if wa.get("version") != wb.get("version"):
            rows.append({"name": wa["name"], "ratio": None,
                         "verdict": f"versions differ ({wa.get('version')} vs {wb.get('version')}): not comparable"})
            continue
        ratio, verdict = judge(wa["throughput"], wb["throughput"])
        mem = wb["peak_mem_bytes"] / wa["peak_mem_bytes"] if wa.get("peak_mem_bytes") else None
        rows.append({"name": wa["name"], "ratio": ratio, "verdict": verdict, "mem_ratio": mem,
                     "a_median": wa["throughput"]["median"], "b_median": wb["throughput"]["median"],
                     "noise_band": noise_band(wa["throughput"], wb["throughput"])})
    names_a = {w["name"] for w in a["workloads"]}
    rows += [{"name": n, "ratio": None, "verdict": "missing in A"} for n in by_name if n not in names_a]
    return rows
