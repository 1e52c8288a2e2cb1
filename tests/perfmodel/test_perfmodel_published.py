"""Reading published rows: free-text fields, and measured throughput recounted by each source's
FLOP convention (checked against the file's own derived column, which it must reproduce)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.published import measured_tokens_per_s_per_gpu, row_inputs

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "perfmodel"


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    path = SHARED / "published_dev.csv"
    if not path.exists():
        pytest.skip(f"../shared/perfmodel/published_dev.csv not found: {path}")
    return list(csv.DictReader(path.open()))


def test_recounted_throughput_matches_derived_column(rows: list[dict]) -> None:
    cat = load_catalog()
    checked = 0
    for row in rows:
        derived = row["derived_tokens_per_s_per_gpu"].strip()
        if not derived:
            continue
        meas, how = measured_tokens_per_s_per_gpu(row, row_inputs(row, cat))
        assert meas == pytest.approx(float(derived), rel=0.02), (row["row_id"], how)
        checked += 1
    assert checked >= 20


def test_free_text_fields(rows: list[dict]) -> None:
    cat = load_catalog()
    by_id = {r["row_id"]: r for r in rows}
    sc = row_inputs(by_id["sc21t1-6"], cat)
    assert (sc.layout.schedule, sc.layout.vpp, sc.layout.recompute, sc.layout.precision) == \
        ("interleaved", 3, "full", "fp16")
    assert sc.layout.attention == "materialized" and not sc.layout.dp_overlap  # DDP-impl=local, 2021
    k = row_inputs(by_id["korth-2"], cat)
    assert (k.layout.sp, k.layout.recompute) == (True, "selective")
    m = row_inputs(by_id["meg24-5"], cat)
    assert (m.layout.zero, m.layout.precision, m.layout.attention, m.layout.tp_overlap) == (1, "bf16", "flash", True)
    assert m.recompute_auto and m.hardware.name == "h100-sxm" and m.spec.vocab == 131072
