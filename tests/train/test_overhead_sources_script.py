"""`benchmarks/overhead.py --sources` (docs/overhead.md) runs on the trainer as it is (a smoke run, not a measurement).

benchmarks/overhead_sources.py drives the trainer's loop body by hand, so it breaks when a private step changes:
it failed with "'Trainer' object has no attribute '_open_run_dir'" after fit() began opening its run folder
itself; and `overhead.py --sources` printed its table only as JSON (nothing at all without --json).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_overhead_sources_prints_every_source_and_the_whole_step() -> None:
    out = subprocess.run([sys.executable, "benchmarks/overhead.py", "--sources", "--json"], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)  # stdout is the JSON alone, the table goes to stderr
    sources = report["sources_us"]
    assert len(sources) == 11 and all(v >= 0 for v in sources.values())
    assert sources["step timer (start, 4 marks, end)"] > 0
    assert report["one_linear_model_loop_cpu_us_per_step"] > 0 and report["one_linear_model_stride_cpu_us_per_step"] > 0
    table = out.stderr.strip().splitlines()
    assert all(any(line.startswith(k) and line.endswith(" us") for line in table) for k in sources)
    assert any(line.startswith("one-Linear model, CPU us a step: loop ") for line in table)
    assert report["cpu"] and report["cores"] >= 1
