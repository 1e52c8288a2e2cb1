"""`results.json`: a versioned schema that `stride compare`, `stride report` and `stride plan` read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMA = "stride.bench.results"
SCHEMA_VERSION = 1
REQUIRED_WORKLOAD_KEYS = ("name", "throughput", "mfu", "peak_mem_bytes", "step_time_breakdown_s", "time_to_target_s")
REQUIRED_THROUGHPUT_KEYS = ("unit", "median", "min", "max", "cv")


class ResultsError(ValueError):
    pass


def validate_results(obj: Any, where: str = "results.json") -> dict[str, Any]:
    if not isinstance(obj, dict) or obj.get("schema") != SCHEMA:
        raise ResultsError(f"{where}: not a stride results file (missing schema = {SCHEMA!r})")
    if obj.get("schema_version") != SCHEMA_VERSION:
        raise ResultsError(f"{where}: schema_version {obj.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    for key in ("suite", "environment", "workloads"):
        if key not in obj:
            raise ResultsError(f"{where}: missing key {key!r}")
    for i, w in enumerate(obj["workloads"]):
        for key in REQUIRED_WORKLOAD_KEYS:
            if key not in w:
                raise ResultsError(f"{where}: workloads[{i}] ({w.get('name', '?')}) is missing {key!r}")
        for key in REQUIRED_THROUGHPUT_KEYS:
            if key not in w["throughput"]:
                raise ResultsError(f"{where}: workloads[{i}].throughput is missing {key!r}")
    return obj


def load_results(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        obj = json.loads(p.read_text())
    except FileNotFoundError as exc:
        raise ResultsError(f"{p}: no such file") from exc
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{p}: not valid JSON ({exc})") from exc
    return validate_results(obj, str(p))


def make_results(suite: str, environment: dict[str, Any], workloads: list[dict[str, Any]]) -> dict[str, Any]:
    return validate_results(
        {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "suite": suite, "environment": environment,
         "workloads": workloads}
    )
