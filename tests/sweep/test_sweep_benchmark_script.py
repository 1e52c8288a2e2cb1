"""benchmarks/sweep_packing.py runs its cells and prints its ratios (a smoke run, not a measurement)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_run_prints_ratios_and_json():
    out = subprocess.run([sys.executable, "benchmarks/sweep_packing.py", "--quick", "--workloads",
                          "mlp_tiny+train.batch_size=32", "--variants", "packed,sequential", "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    report = json.loads(text[: text.rindex("}") + 1])
    assert [(q["workload"], q["n"]) for q in report["ratios"]] == [("mlp_tiny+train.batch_size=32", 1),
                                                                     ("mlp_tiny+train.batch_size=32", 4)]
    assert all(q["packed_vs_sequential"] > 0 and q["cpu_packed_vs_sequential"] > 0 for q in report["ratios"])
    assert all(r["peak_mem_bytes"] > 0 and not r["errors"] for r in report["rows"])
    assert "pk/seq" in text and report["cpu"] and len(report["loadavg_before"]) == 3
