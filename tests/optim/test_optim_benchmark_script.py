"""benchmarks/optimizers.py: its byte accounting, the skip rows, and one quick run end to end."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "optimizers.py"


def load_script():
    spec = importlib.util.spec_from_file_location("bench_optimizers", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_optimizers"] = mod  # dataclasses look their module up there
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def test_missing_package_gives_a_skip_row_with_the_reason(monkeypatch):
    bench = load_script()
    real = bench._quiet_import

    def fake(module):
        if module.startswith("bitsandbytes"):
            raise ImportError("no module named bitsandbytes")
        return real(module)

    monkeypatch.setattr(bench, "_quiet_import", fake)
    makers, skipped = bench.candidates()
    assert "bnb_adamw8bit" not in makers and "no module named bitsandbytes" in skipped["bnb_adamw8bit"]
    assert {"torch_adamw_fused", "stride_adamw_triton", "stride_adamw8bit", "stride_adafactor"} <= set(makers)


@pytest.mark.slow
def test_quick_run_prints_a_table_and_json_with_every_figure():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the benchmark's own CPU paths
    only = "torch_adamw_fused,stride_adamw_triton,stride_adamw8bit,stride_adafactor,bnb_adamw8bit"
    r = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", "--only", only],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    out = json.loads(lines[-1])
    assert "optimizer" in lines[1] and "B/param" in lines[1]
    rows = {row["name"]: row for row in out["rows"]}
    for name in ("torch_adamw_fused", "stride_adamw_triton", "stride_adamw8bit", "stride_adafactor"):
        row = rows[name]
        assert row["step_ms"] > 0 and row["drift"] is not None and row["val_loss"] is not None, row
    assert rows["stride_adamw_triton"]["drift"] == 0.0  # its CPU path is torch's own AdamW
    assert rows["torch_adamw_fused"]["drift"] < 1e-5
    assert 0 < rows["stride_adamw8bit"]["drift"] < 0.1
    assert 2.0 < rows["stride_adamw8bit"]["state_bytes_per_param"] < 2.2
    assert abs(rows["torch_adamw_fused"]["state_bytes_per_param"] - 8.0) < 0.01
    for name in ("stride_adamw8bit", "stride_adafactor"):
        assert abs(rows[name]["val_vs_adamw"]) < 0.01, rows[name]
    bnb = rows["bnb_adamw8bit"]  # installed with the `compare` extra; a skip row with the reason otherwise
    assert (bnb["step_ms"] is not None and 2.0 < bnb["state_bytes_per_param"] < 2.2) or "skipped" in bnb["note"]
