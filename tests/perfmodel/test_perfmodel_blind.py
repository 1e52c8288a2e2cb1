"""benchmarks/perfmodel_blind.py: the blind-test scorer's arithmetic (error, coverage, refusal kinds) on
a hand-written prediction file, so the figures in docs/perfmodel.md "Blind test" mean what they say."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINYLLAMA = ROOT / "data" / "perfmodel" / "tinyllama.csv"


def _blind():
    spec = importlib.util.spec_from_file_location("perfmodel_blind", ROOT / "benchmarks" / "perfmodel_blind.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_refusal_kind_drops_the_rows_own_text():
    kind = _blind().refusal_kind
    a = kind("recompute 'ACT_CKPT_GRANULARITY=null' is not understood (none, selective, full, rematerialization words)")
    b = kind("recompute 'activations_checkpoint_granularity: null' is not understood (none, selective, full)")
    assert a == b == "recompute '...' is not understood"
    assert kind("MoE model: the number of experts is not stated (write e.g. '8 experts, top-2')") == (
        "MoE model: the number of experts is not stated")


def _tinyllama_row() -> tuple[list[str], dict]:
    if not TINYLLAMA.exists():
        pytest.skip("data/perfmodel/tinyllama.csv is missing")
    with TINYLLAMA.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), next(reader)


def _write(path: Path, fields: list[str], rows: list[dict]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return path


def test_score_error_coverage_and_refusals(tmp_path):
    fields, row = _tinyllama_row()
    second = dict(row, row_id="second")
    third = dict(row, row_id="third")
    path = _write(tmp_path / "rows.csv", fields, [row, second, third])
    meas = float(row["meas_tokens_per_s_per_gpu"])  # 24000 tokens/s per GPU, as the README states
    preds = [
        {"row_id": row["row_id"], "tokens_per_s_per_gpu": meas * 1.10,
         "tokens_per_s_per_gpu_lo": meas * 0.9, "tokens_per_s_per_gpu_hi": meas * 1.2},
        {"row_id": "second", "tokens_per_s_per_gpu": meas * 0.70,
         "tokens_per_s_per_gpu_lo": meas * 0.6, "tokens_per_s_per_gpu_hi": meas * 0.8},
        {"row_id": "third", "tokens_per_s_per_gpu": None, "reason": "gpu 'X-9000': is not a part the catalog knows"},
    ]
    pred_path = tmp_path / "pred.json"
    pred_path.write_text(json.dumps(preds), encoding="utf-8")
    res = _blind().score([str(path)], [str(pred_path)])
    assert res["rows_with_measurement"] == 3 and res["answered"] == 2
    assert res["answered_fraction"] == pytest.approx(2 / 3)
    errs = sorted(r["err_pct"] for r in res["rows"])
    assert errs == pytest.approx([-30.0, 10.0])
    assert res["interval_coverage"] == pytest.approx(0.5)  # 24000 is inside [21600, 28800], not [14400, 19200]
    assert res["refusal_kinds"] == {"gpu '...': is not a part the catalog knows": 1}


def test_memory_is_scored_on_rows_without_a_throughput_too(tmp_path):
    """A row that measures memory and no throughput (round 12's fine-tuning tables) counts in the memory figure."""
    fields, row = _tinyllama_row()
    both = dict(row, row_id="both", meas_peak_mem_gib="20")
    only_mem = {**{k: "" for k in ("meas_iter_time_s", "meas_tokens_per_s_per_gpu", "meas_tflops_per_gpu",
                                   "meas_mfu_pct", "meas_hfu_or_pct_peak", "derived_iter_time_s",
                                   "derived_tokens_per_s_per_gpu")},
                **{k: v for k, v in row.items() if not k.startswith(("meas_", "derived_"))},
                "row_id": "only_mem", "meas_peak_mem_gib": "40"}
    path = _write(tmp_path / "rows.csv", fields, [both, only_mem])
    meas = float(row["meas_tokens_per_s_per_gpu"])
    preds = [{"row_id": "both", "tokens_per_s_per_gpu": meas, "peak_mem_gib": 22.0},
             {"row_id": "only_mem", "tokens_per_s_per_gpu": meas, "peak_mem_gib": 30.0}]
    pred_path = tmp_path / "pred.json"
    pred_path.write_text(json.dumps(preds), encoding="utf-8")
    res = _blind().score([str(path)], [str(pred_path)])
    assert res["rows_with_measurement"] == 1 and res["answered"] == 1  # throughput: the first row alone
    assert res["memory"]["n"] == 2
    assert res["memory"]["median_signed_pct"] == pytest.approx(-7.5)  # +10% and -25%: median -7.5%
    assert res["rows"][0]["mem_err_pct"] == pytest.approx(10.0)


def test_holdout_script_scores_each_file_and_all_of_them(tmp_path):
    """benchmarks/perfmodel_holdout.py: per file and pooled, the same figures perfmodel_blind gives each file."""
    if not TINYLLAMA.exists():
        pytest.skip("data/perfmodel/tinyllama.csv is missing")
    spec = importlib.util.spec_from_file_location("perfmodel_holdout", ROOT / "benchmarks" / "perfmodel_holdout.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torchtune = ROOT / "data" / "perfmodel" / "torchtune.csv"
    res = mod.score_files([TINYLLAMA, torchtune])
    assert set(res["files"]) == {"tinyllama", "torchtune"}
    assert res["all"]["rows_with_measurement"] == sum(f["rows_with_measurement"] for f in res["files"].values())
    assert res["all"]["answered"] == sum(f["answered"] for f in res["files"].values()) > 0
    one = res["files"]["tinyllama"]
    assert one["answered"] == 1 and one["median_abs_pct"] == pytest.approx(abs(one["median_signed_pct"]))
