"""A row's measurement that cannot be true is named and never scored as the model's error (outside audit, round 9):
an MFU above 100 %, columns that disagree by more than a FLOP convention can explain, a non-positive number, a
throughput above the device's peak; and `--from-csv` names repeated row ids and fails when it predicts nothing."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.measured import _peak_in_text
from stride.perfmodel.published import row_inputs

ROW = {"row_id": "t", "model": "Llama 2 7B", "arch": "llama", "params_b": "6.74", "layers": "32", "hidden": "4096",
       "heads": "32", "kv_heads": "32", "ffn_hidden": "11008", "ffn_act": "swiglu", "vocab": "32000",
       "seq_len": "4096", "global_batch_seqs": "256", "micro_batch": "4", "gpu": "A100 80GB", "num_gpus": "8",
       "gpus_per_node": "8", "tp": "1", "pp": "1", "dp": "8", "cp": "1", "zero_or_fsdp": "distributed optimizer",
       "recompute": "none", "precision": "bf16", "framework": "Megatron-LM", "tflops_metric": "", "meas_mfu_pct": "",
       "meas_tflops_per_gpu": "", "meas_tokens_per_s_per_gpu": "", "meas_iter_time_s": ""}


def _measured(**over: str) -> tuple[float | None, str]:
    row = {**ROW, **over}
    return row_inputs(row, load_catalog()).measured(row)


def test_a_plausible_measurement_is_read() -> None:
    value, how = _measured(meas_tokens_per_s_per_gpu="3000", meas_tflops_per_gpu="137")
    assert value == 3000 and how == "meas_tokens_per_s_per_gpu"


@pytest.mark.parametrize(("over", "words"), [
    ({"meas_mfu_pct": "250"}, "above 100%"),
    ({"meas_tflops_per_gpu": "5000"}, "above 100%"),  # 5000 TFLOP/s on an A100 (312 peak)
    ({"meas_tokens_per_s_per_gpu": "1", "meas_tflops_per_gpu": "137"}, "disagree"),
    ({"meas_tokens_per_s_per_gpu": "-5"}, "not a positive number"),
    ({"meas_iter_time_s": "nan"}, "not a positive number"),
    ({"meas_tokens_per_s_per_gpu": "0"}, "not a positive number"),
])
def test_an_impossible_measurement_is_not_scored(over: dict, words: str) -> None:
    value, how = _measured(**over)
    assert value is None and words in how and "not scored" in how


@pytest.mark.parametrize(("text", "peak"), [
    ("MFU over bf16 dense peak (A100 312, H100 989 TFLOP/s, as the blog states)", None),  # one per part: catalog's
    ("MFU against a peak of 989 TFLOP/s", 989e12),
    ("MFU = TFLOPs / 312 TFLOP/s", 312e12),
    ("MFU over the H100 peak", None),
    # a peak written before each part it belongs to (blind round 30's torchtitan A100 rows read 989 and were refused)
    ("over the bf16 dense peak (989 TFLOP/s H100 SXM, 312 A100)", None),
    ("peak 989 TFLOP/s per H100", 989e12),
])
def test_a_peak_named_in_the_text(text: str, peak: float | None) -> None:
    assert _peak_in_text(text) == peak


def _write(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(ROW))
        w.writeheader()
        w.writerows(rows)
    return path


def test_from_csv_names_repeated_ids_and_unscored_measurements(tmp_path: Path, capsys) -> None:
    f = _write(tmp_path / "rows.csv", [{**ROW, "meas_tokens_per_s_per_gpu": "3000"},
                                       {**ROW, "meas_mfu_pct": "250"}])
    assert main(["plan", "--from-csv", str(f), "--json"]) == 0
    first, second = json.loads(capsys.readouterr().out)
    assert first["measured_tokens_per_s_per_gpu"] == 3000
    assert "measured_tokens_per_s_per_gpu" not in second and "above 100%" in second["measured_note"]
    assert any("repeats row 1" in n for n in second["notes"])
    assert main(["plan", "--from-csv", str(f)]) == 0
    out = capsys.readouterr().out
    assert "not scored" in out and "repeats row 1" in out


def test_from_csv_fails_when_no_row_is_predicted(tmp_path: Path, capsys) -> None:
    f = _write(tmp_path / "rows.csv", [{**ROW, "gpu": "Z999 accelerator"}])
    assert main(["plan", "--from-csv", str(f), "--json"]) == 1
    assert "no row of" in capsys.readouterr().err
