"""`stride plan` audit 4 (decisions and numbers): each test failed before its fix.

1. `--from-csv` printed per-row errors and no figure over them. 2. A multi-rank plan on a CPU host priced its
collectives on an assumed 64 GB/s link without a word (0.01 ms for a 2-rank all-reduce the host runs in ~1.9 ms).
3. A calibration that fitted `dispatch` = 0.074 (13 us a kernel against the probe's 0.99 us) gave no warning.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.cli.plan_tables import error_summary
from stride.perfmodel.calibrate import factor_warnings
from stride.perfmodel.efficiency import shipped_efficiency
from stride.perfmodel.hardware import load_catalog

ROOT = Path(__file__).resolve().parents[2]


def test_from_csv_prints_the_error_over_its_measured_rows(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"row_id": "a", "tokens_per_s_per_gpu": 110.0, "tokens_per_s_per_gpu_lo": 90.0,
             "tokens_per_s_per_gpu_hi": 130.0, "measured_tokens_per_s_per_gpu": 100.0, "error_pct": 10.0},
            {"row_id": "b", "tokens_per_s_per_gpu": 70.0, "tokens_per_s_per_gpu_lo": 60.0,
             "tokens_per_s_per_gpu_hi": 80.0, "measured_tokens_per_s_per_gpu": 100.0, "error_pct": -30.0},
            {"row_id": "c", "reason": "gpu 'X-9000': is not a part the catalog knows"}]
    line = error_summary(rows)
    assert line == ("2 measured rows predicted (1 refused): median |error| 20.0%, p90 28.0%, signed median "
                    "-10.0%; the 80% interval holds 1 of 2 (50%)")
    assert error_summary([rows[2]]) is None
    csv = ROOT / "data" / "perfmodel" / "torchtune.csv"
    assert main(["plan", "--from-csv", str(csv)]) == 0
    assert "measured rows predicted (0 refused): median |error|" in capsys.readouterr().out


def test_a_multi_rank_cpu_plan_says_its_collectives_are_assumed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--workload", "mlp_tiny", "--hardware", "epyc-9654", "--devices", "2", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert len(notes) == 1 and "assumed link of 64 GB/s" in notes[0] and "stride comm --profile-out" in notes[0]
    assert main(["plan", "--workload", "mlp_tiny", "--hardware", "epyc-9654", "--devices", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == []  # one device: no collectives


def test_a_factor_far_below_one_is_named() -> None:
    import dataclasses

    hw = load_catalog().get("epyc-9654")
    eff = dataclasses.replace(shipped_efficiency(), dispatch=0.074, gemm=0.5)
    (warning,) = factor_warnings(eff, ("gemm", "dispatch"), hw)
    assert warning.startswith("fitted dispatch = 0.074: the runs went 14x slower than hardware `epyc-9654`'s "
                              "kernel_overhead_us (per kernel)")


def test_a_plan_prints_what_limited_its_search(capsys: pytest.CaptureFixture[str]) -> None:
    """The planner's notes (a framework with no tensor or pipeline parallelism; a per-replica batch with no small
    divisor) reach the table and the JSON."""
    assert main(["plan", "--model", "llama3-8b", "--devices", "8", "--framework", "ddp", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["best"] is None and any("runs no tensor or pipeline parallelism" in n for n in out["notes"])
    args = ["plan", "--model", "layers=12,hidden=1024,heads=16,vocab=32000,seq=1024", "--devices", "4"]
    assert main([*args, "--global-batch", "3908"]) == 0
    assert "note: dp4: each replica takes 977 sequences, which has no divisor from 2 to 16" in capsys.readouterr().out


def test_an_efficiency_file_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Its factors and the part it was calibrated on come from one read (it was read twice)."""
    from stride.perfmodel import efficiency

    f = tmp_path / "eff.json"
    f.write_text(json.dumps({"efficiency": {"gemm": 0.7}, "hardware": "local-cpu"}))
    reads: list[str] = []
    real = efficiency.read_json
    monkeypatch.setattr(efficiency, "read_json", lambda p: reads.append(str(p)) or real(p))
    assert main(["plan", "--model", "llama3-8b", "--devices", "8", "--efficiency", str(f), "--json"]) == 0
    assert reads.count(str(f)) == 1
    assert "was calibrated on local-cpu" in capsys.readouterr().err
