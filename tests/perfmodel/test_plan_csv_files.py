"""`stride plan --from-csv`: a count cell that holds no number is named for what it holds (an outside audit).

Each test failed before its fix: `nan` in a count column read as blank ("`seq_len` is blank", a preset's value for a
blank width, or an optional column's default without a word), and `inf` / `abc` as "must be a positive integer".
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from stride.cli.main import main

DEV = Path(__file__).resolve().parents[2] / "data" / "perfmodel" / "published_dev.csv"
COLUMNS = ["row_id", "model", "layers", "hidden", "heads", "vocab", "seq_len", "global_batch_seqs", "micro_batch",
           "gpu", "num_gpus", "tp", "pp", "precision", "framework", "notes"]
ROW = {"row_id": "r1", "model": "GPT", "layers": "24", "hidden": "2048", "heads": "16", "vocab": "51200",
       "seq_len": "2048", "global_batch_seqs": "64", "micro_batch": "1", "gpu": "A100-SXM4-80GB", "num_gpus": "8",
       "tp": "2", "pp": "1", "precision": "bf16", "framework": "Megatron-LM", "notes": "a, quoted note"}
NEEDS = "row_id, layers, hidden, seq_len, gpu and num_gpus"


def _text(rows: list[dict], columns: list[str] = COLUMNS) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, columns, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def _plan(capsys: pytest.CaptureFixture[str], path: Path, *more: str) -> tuple[int, str, str]:
    code = main(["plan", "--from-csv", str(path), *more])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _without(tmp_path: Path, *drop: str) -> Path:
    """published_dev.csv with the columns `drop` deleted (the audit's reproduction)."""
    rows = list(csv.reader(DEV.open(newline="", encoding="utf-8-sig")))
    keep = [i for i, name in enumerate(rows[0]) if name not in drop]
    p = tmp_path / "dropped.csv"
    with p.open("w", newline="") as fh:
        csv.writer(fh).writerows([[r[i] for i in keep] for r in rows])
    return p


# -- 2. a count cell that holds no number ------------------------------------------------------------------------

@pytest.mark.parametrize("value,reason", [
    ("nan", "`seq_len` is 'nan', not a number"),
    ("NaN", "`seq_len` is 'NaN', not a number"),
    ("inf", "`seq_len` is 'inf', not a finite number"),
    ("-Infinity", "`seq_len` is '-Infinity', not a finite number"),
    ("1e999", "`seq_len` is '1e999', not a finite number"),
    ("abc", "`seq_len` is 'abc', not a number"),
], ids=["nan", "NaN", "inf", "-Infinity", "1e999", "abc"])
def test_a_non_number_is_named_for_what_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str,
                                              reason: str) -> None:
    p = tmp_path / "rows.csv"
    p.write_text(_text([ROW, {**ROW, "row_id": "bad-1", "seq_len": value}]))
    code, out, _ = _plan(capsys, p, "--json")
    good, bad = json.loads(out)
    assert code == 0 and good.get("reason") is None  # the other row is still predicted
    assert bad["row_id"] == "bad-1" and bad["reason"] == reason and bad["iter_time_s"] is None
    code, out, _ = _plan(capsys, p)
    line = next(ln for ln in out.splitlines() if "bad-1" in ln)  # the table names the row beside its reason
    assert code == 0 and f"not modelled: {reason}" in line


def test_nan_in_an_optional_column_is_not_its_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`tp` nan had been read as blank, so as tp 1 (another layout than the run's) without a word."""
    p = tmp_path / "rows.csv"
    p.write_text(_text([{**ROW, "tp": "nan"}]))
    code, out, err = _plan(capsys, p, "--json")
    (row,) = json.loads(out)
    assert code == 1 and row["reason"] == "`tp` is 'nan', not a number" and "no row of" in err


def test_nan_is_not_filled_from_the_models_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A blank width of a row naming a preset takes the preset's; a NaN is not a blank to fill."""
    p = tmp_path / "rows.csv"
    p.write_text(_text([{**ROW, "model": "Llama 3 8B", "hidden": ""}, {**ROW, "row_id": "r2", "model": "Llama 3 8B",
                                                                        "hidden": "nan"}]))
    code, out, _ = _plan(capsys, p, "--json")
    blank, nan = json.loads(out)
    assert code == 0 and blank.get("reason") is None and any("preset" in a for a in blank["assumed"])
    assert nan["reason"] == "`hidden` is 'nan', not a number"
