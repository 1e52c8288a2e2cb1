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


def test_score_error_coverage_and_refusals(tmp_path):
    if not TINYLLAMA.exists():
        pytest.skip("data/perfmodel/tinyllama.csv is missing")
    with TINYLLAMA.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        fields, row = reader.fieldnames, next(reader)
    second = dict(row, row_id="second")
    third = dict(row, row_id="third")
    path = tmp_path / "rows.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows([row, second, third])
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
