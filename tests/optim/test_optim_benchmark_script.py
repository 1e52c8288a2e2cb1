"""benchmarks/optimizers.py and benchmarks/adamw8bit_ablation.py: the skip rows, and quick runs end to end."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "optimizers.py"
ABLATION = REPO / "benchmarks" / "adamw8bit_ablation.py"
FORMAT1_REV = "f841289"  # the last commit with state format 1 (e4m3)


def has_revision(rev: str) -> bool:
    r = subprocess.run(["git", "cat-file", "-e", f"{rev}:stride/optim/adamw8bit.py"], cwd=REPO, capture_output=True)
    return r.returncode == 0


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
    baseline = ["--baseline", FORMAT1_REV] if has_revision(FORMAT1_REV) else []
    r = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", "--only", only, *baseline],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    out = json.loads(lines[-1])
    assert "optimizer" in lines[1] and "B/param" in lines[1]
    rows = {row["name"]: row for row in out["rows"]}
    for name in ("torch_adamw_fused", "stride_adamw_triton", "stride_adamw8bit", "stride_adafactor"):
        row = rows[name]
        assert row["step_ms"] > 0 and row["val_loss"] is not None, row
        assert None not in (row["drift"], row["drift_b2"], row["drift_heavy"]), row
    assert rows["stride_adamw_triton"]["drift"] == 0.0  # its CPU path is torch's own AdamW
    assert rows["torch_adamw_fused"]["drift"] < 1e-5
    assert 0 < rows["stride_adamw8bit"]["drift"] < 0.01 and 0 < rows["stride_adamw8bit"]["drift_heavy"] < 0.02
    assert 2.0 < rows["stride_adamw8bit"]["state_bytes_per_param"] < 2.2
    assert abs(rows["torch_adamw_fused"]["state_bytes_per_param"] - 8.0) < 0.01
    for name in ("stride_adamw8bit", "stride_adafactor"):
        assert abs(rows[name]["val_vs_adamw"]) < 0.01, rows[name]
    if baseline:  # format 1, loaded from git: the same state bytes, a larger drift
        old = rows[f"stride_adamw8bit@{FORMAT1_REV}"]
        assert old["state_bytes_per_param"] == rows["stride_adamw8bit"]["state_bytes_per_param"]
        assert old["drift"] > 2 * rows["stride_adamw8bit"]["drift"], (old, rows["stride_adamw8bit"])
    bnb = rows["bnb_adamw8bit"]  # installed with the `compare` extra; a skip row with the reason otherwise
    assert (bnb["step_ms"] is not None and 2.0 < bnb["state_bytes_per_param"] < 2.2) or "skipped" in bnb["note"]


def test_ablation_quick_run_covers_every_variant():
    r = subprocess.run([sys.executable, str(ABLATION), "--quick", "--json"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])["drift"]
    assert len(out) >= 14 and all(set(row) == {"plain", "b2", "heavy"} for row in out.values())
    real, sim = out["format 2 (stride.optim.adamw8bit)"], out["format 2 (simulated)"]
    old = out["format 1: e4m3 m, e4m3 sqrt(v)"]
    for seq in ("plain", "b2", "heavy"):
        assert abs(real[seq] - sim[seq]) <= 0.1 * real[seq], (seq, real, sim)  # the simulator is the optimizer
        assert real[seq] < old[seq], (seq, real, old)


def test_ablation_names_a_bad_sequence():
    r = subprocess.run([sys.executable, str(ABLATION), "--quick", "--sequences", "plain,nope"], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 2 and "--sequences: unknown ['nope']" in r.stderr
