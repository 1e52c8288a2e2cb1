"""Reading published rows: free-text fields, and measured throughput recounted by each source's
FLOP convention (checked against the rows' own derived columns and MFU, which it must reproduce)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.measured import measured_tokens_per_s
from stride.perfmodel.published import row_inputs

DATA = Path(__file__).resolve().parents[2] / "data" / "perfmodel"


def _rows(name: str) -> dict[str, dict]:
    return {r["row_id"]: r for r in csv.DictReader((DATA / name).open())}


def _measured(row: dict) -> tuple[float, str]:
    inp = row_inputs(row, load_catalog())
    assert inp.reason is None, inp.reason
    peak = inp.hardware.peak_tflops["fp8" if inp.layout.precision == "fp8" else "bf16"] * 1e12
    meas, how = measured_tokens_per_s(row, inp.spec, inp.global_batch, inp.layout.devices, peak)
    assert meas is not None, how
    return meas, how


def test_recounted_throughput_matches_derived_column() -> None:
    checked = 0
    for row in _rows("published_dev.csv").values():
        derived = row["derived_tokens_per_s_per_gpu"].strip()
        if derived:
            meas, how = _measured(row)
            assert meas == pytest.approx(float(derived), rel=0.02), (row["row_id"], how)
            checked += 1
    assert checked >= 20


def test_mfu_only_rows_convert_with_their_convention() -> None:
    """A row that gives only MFU (or TFLOP/s) converts back to the tokens/s the source measured:
    llm-foundry's rows give all three, so dropping the tokens/s must reproduce it."""
    rows = _rows("llm_foundry.csv")
    for rid in ("mpt-a100-80-7b-s2048-g8-mb6", "mpt-h100-13b-s2048-g8-mb2", "mpt-h100-fp8-3b-s2048-g8-mb10"):
        row = rows[rid]
        truth = float(row["meas_tokens_per_s_per_gpu"])
        only_mfu = {**row, "meas_tokens_per_s_per_gpu": "", "meas_tflops_per_gpu": ""}
        only_tflops = {**row, "meas_tokens_per_s_per_gpu": "", "meas_mfu_pct": ""}
        for variant in (only_mfu, only_tflops):
            meas, how = _measured(variant)
            assert "llm-foundry" in how
            assert meas == pytest.approx(truth, rel=0.02), (rid, how)


def test_maxtext_tflops_convention_matches_mfu() -> None:
    """MaxText's TFLOP/s per chip and its MFU (against the chip's bf16 peak) are one measurement."""
    for row in _rows("maxtext_tpu_2023.csv").values():
        tflops = {**row, "meas_mfu_pct": ""}
        mfu = {**row, "meas_tflops_per_gpu": ""}
        assert _measured(tflops)[0] == pytest.approx(_measured(mfu)[0], rel=0.01), row["row_id"]


def test_free_text_fields_of_the_megatron_rows() -> None:
    cat = load_catalog()
    rows = _rows("published_dev.csv")
    sc = row_inputs(rows["sc21t1-6"], cat)
    assert (sc.layout.schedule, sc.layout.vpp, sc.layout.recompute, sc.layout.precision) == \
        ("interleaved", 3, "full", "fp16")
    assert sc.layout.attention == "materialized" and sc.layout.framework == "megatron-legacy"  # DDP-impl=local, 2021
    assert row_inputs(rows["sc21t1-1"], cat).layout.framework == "megatron"  # DDP-impl=torch: overlapped
    k = row_inputs(rows["korth-2"], cat)
    assert (k.layout.sp, k.layout.recompute) == (True, "selective")
    m = row_inputs(rows["meg24-5"], cat)
    assert (m.layout.zero, m.layout.precision, m.layout.attention, m.layout.tp_overlap) == (1, "bf16", "flash", True)
    assert m.recompute_auto and m.hardware.name == "h100-sxm" and m.spec.vocab == 131072


def test_free_text_fields_of_the_new_sources() -> None:
    cat = load_catalog()
    f = row_inputs(_rows("llm_foundry.csv")["mpt-h100-fp8-3b-s2048-g8-mb10"], cat)
    assert (f.layout.framework, f.layout.zero, f.layout.precision, f.layout.fp8_recipe) == \
        ("fsdp1", 3, "fp8", "delayed")
    assert (f.spec.learned_pos, f.spec.bias, f.spec.tied_embeddings, f.spec.dropout) == (True, True, True, False)
    t = row_inputs(_rows("maxtext_tpu_2023.csv")["maxtext-v5p-128b-2x512"], cat)
    assert (t.hardware.name, t.hardware.scaleup_domain, t.layout.devices) == ("tpu-v5p", 256, 512)
    assert (t.spec.head_dim, t.spec.q_dim, t.spec.hidden, t.spec.act) == (256, 16384, 10240, "relu")
    # remat minimal saves only the batch-free dots: the attention core is recomputed
    assert (t.layout.framework, t.layout.recompute, t.layout.tp) == ("maxtext", "selective", 8)
    moe = row_inputs(_rows("maxtext_gpu_2024_tpu_2025.csv")["maxtext-v6e-mixtral-8x22b-256"], cat)
    assert (moe.spec.experts, moe.spec.top_k, moe.spec.capacity, moe.layout.ep) == (8, 2, 1.25, 4)
    assert moe.layout.recompute == "mlp"
    tt = row_inputs(_rows("torchtune.csv")["torchtune-llama3.2-3b-compile"], cat)
    assert (tt.layout.framework, tt.layout.compile, tt.layout.fused_loss, tt.memory_kind) == \
        ("torchtune", True, True, "allocated")
    ds = row_inputs(_rows("megatron_deepspeed.csv")["mds-rebase-gpt13b-128v100"], cat)
    assert (ds.layout.framework, ds.layout.zero, ds.hardware.name, ds.hardware.scaleup_domain) == \
        ("deepspeed", 1, "v100", 16)
    assert ds.hardware.scaleout_bw_gbps == pytest.approx(660 / 16 / 8)  # "around 660 Gbps measured per node"
