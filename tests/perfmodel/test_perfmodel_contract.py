"""The `stride plan --from-csv FILE --json` contract: one JSON object per row with row_id,
tokens_per_s_per_gpu, iter_time_s, mfu, peak_mem_gib, fits and the 80% interval fields, `reason`
only when refused; any CSV with the columns, whatever text is in its cells, never raises."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stride.cli.main import main
from stride.perfmodel.efficiency import Efficiency
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.intervals import load_intervals
from stride.perfmodel.predict_rows import predict_row

DATA = Path(__file__).resolve().parents[2] / "data" / "perfmodel"
ROWS = [r for name in ("published_dev.csv", "llm_foundry.csv", "maxtext_gpu_2024_tpu_2025.csv", "torchtune.csv")
        for r in csv.DictReader((DATA / name).open())][::7]
COLUMNS = list(ROWS[0])
KEYS = {"row_id", "tokens_per_s_per_gpu", "iter_time_s", "mfu", "peak_mem_gib", "fits", "tokens_per_s_per_gpu_lo",
        "tokens_per_s_per_gpu_hi", "iter_time_s_lo", "iter_time_s_hi"}
CAT, EFF, TABLE = load_catalog(), Efficiency(), load_intervals()

garbage = st.one_of(
    st.text(max_size=40), st.just(""), st.sampled_from(["nan", "inf", "-inf", "1e999", "-3", "0", "1,024", "4.2k",
                                                        "1e-300", "n/a", "None", "True", "  ", "\x00", "🦄", "1/0"]),
    st.integers(-10**12, 10**12).map(str), st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["H100-SXM 96GB HBM2e 2.4TB/s @500W", "GB200-NVL72 (B200 GPU)", "squared-relu", "TPU v4-8",
                     "rematerialization (HFU>MFU)", "FSDP FULL_SHARD", "MXFP8", "8 experts, top-2", "100000 experts"]),
)


def _check(out: dict, row_id: str) -> None:
    assert set(out) >= KEYS and out["row_id"] == (row_id.strip() or "?")
    if out.get("reason"):
        assert all(out[k] is None for k in KEYS - {"row_id"})
        assert isinstance(out["reason"], str) and out["reason"]
    else:
        for k in ("tokens_per_s_per_gpu", "iter_time_s", "mfu", "peak_mem_gib"):
            assert isinstance(out[k], float) and math.isfinite(out[k]) and out[k] > 0, (k, out[k])
        assert out["tokens_per_s_per_gpu_lo"] <= out["tokens_per_s_per_gpu"] <= out["tokens_per_s_per_gpu_hi"]
        assert out["iter_time_s_lo"] <= out["iter_time_s"] <= out["iter_time_s_hi"]
        assert isinstance(out["fits"], bool)
    json.dumps(out, allow_nan=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(ROWS) - 1), st.dictionaries(st.sampled_from(COLUMNS), garbage, max_size=6))
def test_mutated_rows_never_raise(index: int, changes: dict) -> None:
    row = {**ROWS[index], **changes}
    _check(predict_row(row, CAT, EFF, TABLE), str(row.get("row_id") or ""))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(COLUMNS), garbage))
def test_rows_of_pure_garbage_never_raise(row: dict) -> None:
    _check(predict_row(row, CAT, EFF, TABLE), str(row.get("row_id") or ""))


def test_cli_prints_one_object_per_row_of_any_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weird = [{**ROWS[0], "row_id": "w1", "gpu": "Z9000"}, {**ROWS[1], "row_id": "w2", "ffn_act": "relu^2"},
             {**ROWS[2], "row_id": "w3", "layers": "", "hidden": "big"}, {c: "" for c in COLUMNS},
             {**ROWS[3], "row_id": "w5", "num_gpus": "1e999"}, {**ROWS[4], "row_id": "w6", "precision": "NVFP4"}]
    buf = io.StringIO()
    w = csv.DictWriter(buf, COLUMNS)
    w.writeheader()
    w.writerows(ROWS + weird)
    f = tmp_path / "rows.csv"
    f.write_text(buf.getvalue())
    assert main(["plan", "--from-csv", str(f), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert isinstance(out, list) and len(out) == len(ROWS) + len(weird)
    for o, r in zip(out, ROWS + weird, strict=True):
        _check(o, r["row_id"])
    by_id = {o["row_id"]: o for o in out}
    assert "Z9000" in by_id["w1"]["reason"] and "hidden" in by_id["w3"]["reason"]
    assert by_id["w2"].get("reason") is None  # relu^2 is squared-relu
    assert "fp4" in by_id["w6"]["reason"]  # NVFP4 on an A100/H100: no fp4 peak
    assert sum(1 for o in out if not o.get("reason")) >= len(ROWS)


def test_header_without_row_id_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "bad.csv"
    f.write_text("a,b\n1,2\n")
    assert main(["plan", "--from-csv", str(f), "--json"]) == 2
    assert "row_id" in capsys.readouterr().err
