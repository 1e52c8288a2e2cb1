"""benchmarks/overhead.py: a framework that was not run reads "not run (why)", and null in the JSON.

Before: `--frameworks none` printed `lightning/loop 0.000; accelerate/loop 0.000`, ratios no run measured.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
overhead = pytest.importorskip("overhead", reason="benchmarks/overhead.py is not importable")


def test_frameworks_not_run_are_named_not_zero() -> None:
    # the loop and stride only, 4 timed steps of mlp_tiny: a smoke run of compare(), not a measurement
    out = overhead.compare(["mlp_tiny"], rounds=1, threads=1, skip=2, log=lambda *_: None, frameworks=("none",),
                           steps={"mlp_tiny": 6})
    assert out["skipped"]["lightning"] and out["skipped"]["accelerate"]
    assert out["lightning_ratio_mlp_tiny"] is None and out["accelerate_ratio_mlp_tiny_cpu"] is None
    assert out["ahead_of_lightning_mlp_tiny"] is None
    assert json.loads(json.dumps(out))["lightning_ratio_mlp_tiny"] is None  # null in --json, not 0
    line = overhead.summary_line("mlp_tiny", out)
    assert "lightning/loop not run (" in line and "accelerate/loop not run (" in line and "0.000" not in line
    assert "not requested (--frameworks)" in line or "not installed" in line
    assert line.startswith(f"mlp_tiny: stride/loop {out['overhead_ratio_mlp_tiny']:.3f} wall")


def test_a_framework_that_ran_prints_its_ratio() -> None:
    out = {"ms_per_step": {"loop": 1.0, "stride": 1.01, "lightning": 1.5}, "overhead_ratio": 1.01,
           "overhead_ratio_cpu": 1.02, "overhead_ratio_paired": 1.01, "overhead_ratio_paired_ci95": [0.99, 1.03],
           "lightning_ratio": 1.5, "accelerate_ratio": None, "skipped": {"accelerate": "not requested (--frameworks)"}}
    line = overhead.summary_line("quick", out)
    assert "lightning/loop 1.500" in line and "accelerate/loop not run (not requested (--frameworks))" in line


def test_json_stdout_is_the_json_alone() -> None:
    """`overhead.py --json | jq` works: the rounds and summary lines go to stderr (they were on stdout, above
    the JSON, so `json.load` of the output failed)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "benchmarks/overhead.py", "--models", "mlp_tiny", "--rounds", "1",
                          "--frameworks", "none", "--steps", "mlp_tiny=8", "--json"],
                         capture_output=True, text=True, cwd=root, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["overhead_ratio_mlp_tiny"] > 0 and report["cpu"]
    assert "round 0: mlp_tiny/loop" in out.stderr and "mlp_tiny: stride/loop" in out.stderr
