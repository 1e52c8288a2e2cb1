"""benchmarks/prefetch_ab.py, the check behind the probe's prefetch rule, runs (a smoke run, not a measurement):
both settings trained, the paired ratio and the probe's choice with its reason in the JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_prefetch_ab_prints_both_settings_and_the_probes_choice() -> None:
    out = subprocess.run([sys.executable, "benchmarks/prefetch_ab.py", "--model", "mlp_tiny", "--rounds", "1",
                          "--steps", "6", "--skip", "2", "--json"], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    assert r["ms_per_step_prefetch_0"] > 0 and r["ms_per_step_prefetch_2"] > 0
    assert r["prefetch2_over_prefetch0_paired"] > 0 and r["auto_chose"] in (0, 2) and r["auto_reason"]
    bad = subprocess.run([sys.executable, "benchmarks/prefetch_ab.py", "--steps", "5", "--skip", "5"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert bad.returncode == 2 and "--skip 5 must be in (0, --steps 5)" in bad.stderr
