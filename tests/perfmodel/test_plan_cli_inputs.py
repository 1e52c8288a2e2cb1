"""`stride plan` inputs: a truncated CSV row, numbers out of range, the main plan's 80% interval, --help defaults.

Each test failed before its fix: a short row was predicted on assumed columns (now refused alone),
`--global-batch 0` and friends fell back to defaults, the main plan had no interval, and some options stated no
default.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.cli.plan import register
from stride.perfmodel.intervals import load_intervals, run_kind, time_factors

COLUMNS = ["row_id", "model", "layers", "hidden", "heads", "vocab", "seq_len", "global_batch_seqs", "micro_batch",
           "gpu", "num_gpus", "tp", "pp", "precision", "framework", "notes"]
ROW = {"row_id": "r1", "model": "GPT", "layers": "24", "hidden": "2048", "heads": "16", "vocab": "51200",
       "seq_len": "2048", "global_batch_seqs": "64", "micro_batch": "1", "gpu": "A100-SXM4-80GB", "num_gpus": "8",
       "tp": "2", "pp": "1", "precision": "bf16", "framework": "Megatron-LM", "notes": "a, quoted note"}


def _csv(tmp_path: Path, rows: list[dict]) -> tuple[Path, list[str]]:
    """The rows written as a CSV file; returns the path and its lines (quoting as csv writes it)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    p = tmp_path / "rows.csv"
    p.write_text(buf.getvalue())
    return p, buf.getvalue().splitlines()


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


# -- 1. a row with fewer or more fields than the header ---------------------------------------------------------

def test_a_truncated_row_is_refused_naming_file_line_and_missing_columns(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The row alone is refused (a bad row never stops the file: the other rows are still predicted)."""
    p, lines = _csv(tmp_path, [ROW, {**ROW, "row_id": "r2"}])
    cut = lines[2][: lines[2].index(",A100")]  # r2 stops after micro_batch: gpu .. notes lost
    p.write_text("\n".join([*lines[:2], cut]) + "\n")
    code, out, _ = _plan(capsys, "--from-csv", str(p), "--json")
    assert code == 0
    r1, r2 = json.loads(out)
    assert r1["row_id"] == "r1" and r1.get("reason") is None and r1["iter_time_s"] > 0
    assert r2["row_id"] == "r2" and r2["iter_time_s"] is None
    assert str(p) in r2["reason"] and "line 3" in r2["reason"] and "truncated" in r2["reason"]
    assert "missing gpu, num_gpus, tp, pp, precision, framework, notes" in r2["reason"]
    code, out, _ = _plan(capsys, "--from-csv", str(p))
    assert code == 0 and "not modelled" in out and "line 3" in out  # the table says why too


def test_a_row_with_an_extra_field_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p, lines = _csv(tmp_path, [ROW])
    p.write_text("\n".join([lines[0], lines[1] + ",surplus"]) + "\n")
    code, out, _ = _plan(capsys, "--from-csv", str(p), "--json")
    (row,) = json.loads(out)
    assert code == 1 and row["iter_time_s"] is None  # the file's only row refused: nothing predicted, exit 1
    assert str(p) in row["reason"] and "line 2" in row["reason"]
    assert "1 value(s) after the last column `notes`" in row["reason"]


def test_a_trailing_comma_is_not_an_extra_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Empty cells past the last column (a trailing comma) hold nothing: the row is predicted as before."""
    p, lines = _csv(tmp_path, [ROW])
    p.write_text("\n".join([lines[0], lines[1] + ",,"]) + "\n")
    code, out, _ = _plan(capsys, "--from-csv", str(p), "--json")
    (row,) = json.loads(out)
    assert code == 0 and row.get("reason") is None and row["iter_time_s"] > 0


def test_present_empty_cells_are_still_blank_not_truncated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty cell is the format's "not stated": assumed and noted, as before (only a lost cell is an error)."""
    p, _ = _csv(tmp_path, [{**ROW, "tp": "", "pp": "", "precision": "", "framework": "", "notes": ""}])
    code, out, _ = _plan(capsys, "--from-csv", str(p), "--json")
    assert code == 0
    (row,) = json.loads(out)
    assert row["row_id"] == "r1" and row.get("reason") is None and row["iter_time_s"] > 0
    assert any("framework not stated" in a for a in row["assumed"])


def test_the_published_file_truncated_mid_row_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The audit's reproduction: the header, a row and 420 bytes of the next."""
    src = Path(__file__).resolve().parents[2] / "data" / "perfmodel" / "published_dev.csv"  # the repository's copy
    text = src.read_bytes()
    head = len(b"".join(text.splitlines(keepends=True)[:2]))
    p = tmp_path / "trunc2.csv"
    p.write_bytes(text[: head + 420])
    code, out, _ = _plan(capsys, "--from-csv", str(p), "--json")
    rows = {r["row_id"]: r for r in json.loads(out)}
    assert code == 0 and rows["sc21t1-2"]["iter_time_s"] is None
    assert "trunc2.csv" in rows["sc21t1-2"]["reason"] and "line 3" in rows["sc21t1-2"]["reason"]
    assert "tp, pp" in rows["sc21t1-2"]["reason"]


# -- 2. numbers out of range: 0 is a value, not "not given" -----------------------------------------------------

@pytest.mark.parametrize("argv,named", [
    (["--devices", "8", "--global-batch", "0"], "--global-batch must be >= 1, got 0"),
    (["--devices", "8", "--seq", "0"], "--seq must be >= 1, got 0"),
    (["--devices", "0"], "--devices must be >= 1, got 0"),
    (["--devices", "-8"], "--devices must be >= 1, got -8"),
    (["--devices", "8", "--top", "0"], "--top must be >= 1, got 0"),
    (["--devices", "8", "--top", "-1"], "--top must be >= 1, got -1"),
    (["--compare-hardware", "h100:8", "--tokens", "-1"], "--tokens must be a finite number > 0, got -1"),
    (["--compare-hardware", "h100:8", "--tokens", "0"], "--tokens must be a finite number > 0, got 0"),
    (["--compare-hardware", "h100:8", "--tokens", "inf"], "--tokens must be a finite number > 0, got inf"),
    (["--devices", "8", "--threads", "0"], "--threads must be >= 1, got 0"),
], ids=["global-batch-0", "seq-0", "devices-0", "devices-neg", "top-0", "top-neg", "tokens-neg", "tokens-0",
        "tokens-inf", "threads-0"])
def test_a_number_out_of_range_is_an_error_naming_option_and_range(
        capsys: pytest.CaptureFixture[str], argv: list[str], named: str) -> None:
    code, out, err = _plan(capsys, "--model", "llama3-8b", *argv, "--json")
    assert code == 2 and out == ""
    assert named in err


def test_workload_with_devices_0_names_the_range(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _plan(capsys, "--workload", "ts_transformer_small", "--hardware", "local-cpu", "--devices", "0")
    assert code == 2 and "--devices must be >= 1, got 0" in err


def test_given_numbers_are_used_not_replaced(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _plan(capsys, "--model", "llama3-8b", "--devices", "8", "--global-batch", "16", "--seq", "1024",
                         "--top", "1", "--json")
    assert code == 0
    res = json.loads(out)
    assert res["global_batch"] == 16 and res["seq"] == 1024 and len(res["ranked"]) == 1


# -- 3. the main plan's 80% interval ----------------------------------------------------------------------------

def test_the_main_plan_carries_the_80pct_interval_of_its_kind(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _plan(capsys, "--model", "llama3-8b", "--hardware", "h100", "--devices", "64", "--json")
    assert code == 0
    res = json.loads(out)
    q10, q90, basis = load_intervals().bounds(run_kind("hopper", "bf16", "megatron"))
    lo, hi = time_factors(q10, q90)
    assert res["interval_basis"] == basis
    for p in [res["best"], *res["ranked"], *res["alternatives"]]:
        assert math.isclose(p["step_time_s_lo"], p["step_time_s"] * lo)
        assert math.isclose(p["step_time_s_hi"], p["step_time_s"] * hi)
        assert p["step_time_s_lo"] <= p["step_time_s"] <= p["step_time_s_hi"]
        assert p["tokens_per_s_per_device_lo"] <= p["tokens_per_s_per_device"] <= p["tokens_per_s_per_device_hi"]
        assert math.isclose(p["tokens_per_s_per_device_lo"], p["tokens_per_s_per_device"] / hi)


def test_the_main_plan_table_shows_the_interval(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _plan(capsys, "--model", "llama3-8b", "--hardware", "h100", "--devices", "64", "--top", "1")
    assert code == 0
    assert "80% interval" in out and "LOSO residuals" in out
    code, js, _ = _plan(capsys, "--model", "llama3-8b", "--hardware", "h100", "--devices", "64", "--json")
    best = json.loads(js)["best"]
    assert f"{best['step_time_s_lo']:.3f} - {best['step_time_s_hi']:.3f}" in out


# -- 4. --help: every option states its default -----------------------------------------------------------------

def test_every_plan_option_has_help_stating_its_default() -> None:
    parser = argparse.ArgumentParser(prog="stride plan")
    register(parser)
    lacking = [a.option_strings[-1] if a.option_strings else a.dest for a in parser._actions
               if not isinstance(a, argparse._HelpAction) and "default" not in (a.help or "")]
    assert lacking == []
    text = parser.format_help()
    assert "(default: 8)" in text and "(default: bf16)" in text  # --top, --precision


def test_a_mistyped_option_is_named_not_taken_for_an_action(capsys: pytest.CaptureFixture) -> None:
    """`--devcies 8` was "invalid choice: '8' (choose from 'calibrate', 'probe')" (outside audit 21, L1)."""
    try:
        rc = main(["plan", "--model", "llama3-8b", "--devcies", "8"])
    except SystemExit as exc:
        rc = exc.code
    assert rc == 2 and "unrecognized arguments: --devcies" in capsys.readouterr().err
    assert main(["plan", "--model", "llama3-8b", "8"]) == 2
    assert "is not an action of stride plan" in capsys.readouterr().err
