"""`stride plan --from-csv` on files that are not quite the format (an outside audit, and its neighbours).

Each test failed before its fix, unless it says it guards behaviour that already held:
1. a header without a column the model needs (`hidden` deleted) had every row refused as "`hidden` is blank" and
   exited 1 "no row could be predicted"; it is now one file-level error naming every missing column, exit 2 as the
   other input errors of `stride plan`;
2. `nan` in a count column read as blank ("`seq_len` is blank", or an optional column's default without a word);
3. a header with no rows exited 0 ("0 rows") while a file whose rows were all refused exited 1; both exit 1 now;
4. neighbours: a column named twice (silently read from the last), a header's trailing comma (every row refused as
   missing a column named ''), spaces around names, an empty file, UTF-16, a binary file, a semicolon-separated
   file (each reported as a header "without a `row_id` column").
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


# -- 1. a header without a column the model needs ---------------------------------------------------------------

@pytest.mark.parametrize("drop,named", [
    (("hidden",), "the header has no column 'hidden'"),
    (("seq_len", "hidden", "num_gpus"), "the header has no columns 'hidden', 'seq_len', 'num_gpus'"),
    (("gpu",), "the header has no column 'gpu'"),
    (("row_id",), "the header has no column 'row_id'"),
], ids=["hidden", "three", "gpu", "row_id"])
def test_a_missing_required_column_is_one_file_level_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           drop: tuple[str, ...], named: str) -> None:
    p = _without(tmp_path, *drop)
    for more in ((), ("--json",)):
        code, out, err = _plan(capsys, p, *more)
        assert code == 2 and out == ""  # before: a table of 27 "not modelled" rows, exit 1
        assert err.strip().splitlines() == [
            f"stride plan: config error: {p}: {named} (a published-results CSV needs {NEEDS}; any other column may "
            "be left out: data/perfmodel/README.md)"]


def test_a_misspelt_required_column_is_suggested(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "typo.csv"
    p.write_text(_text([ROW]).replace("seq_len", "seq_length", 1))
    code, _, err = _plan(capsys, p)
    assert code == 2 and "no column 'seq_len' (did you mean `seq_length`?)" in err
    # a format column is never offered for a missing one ("hidden" is close to "ffn_hidden")
    code, _, err = _plan(capsys, _without(tmp_path, "hidden"))
    assert code == 2 and "did you mean" not in err


def test_optional_columns_may_be_left_out_of_the_header(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Guards what already held: a header of the required columns alone is predicted (the rest assumed, noted)."""
    need = ["row_id", "layers", "hidden", "seq_len", "gpu", "num_gpus"]
    p = tmp_path / "few.csv"
    p.write_text(_text([{"row_id": "f1", "layers": "32", "hidden": "4096", "seq_len": "4096", "gpu": "H100 SXM",
                         "num_gpus": "8"}], need))
    code, out, _ = _plan(capsys, p, "--json")
    (row,) = json.loads(out)
    assert code == 0 and row.get("reason") is None and row["iter_time_s"] > 0
    assert any("vocab not stated" in a for a in row["assumed"])


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


# -- 3. a file with no rows --------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [_text([]), _text([]) + "\n\n"], ids=["header", "header-and-blank-lines"])
def test_a_header_without_rows_exits_1_as_nothing_predicted(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            text: str) -> None:
    p = tmp_path / "empty_rows.csv"
    p.write_text(text)
    code, out, err = _plan(capsys, p, "--json")
    assert code == 1 and json.loads(out) == []  # the output is still the (empty) list of rows
    assert err.strip().splitlines() == [f"stride plan: {p} has a header and no rows: nothing to predict"]
    code, _, err = _plan(capsys, p)
    assert code == 1 and f"{p} has a header and no rows" in err


def test_every_row_refused_still_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Guards what already held: the same status as a file with no rows."""
    p = tmp_path / "refused.csv"
    p.write_text(_text([{**ROW, "gpu": "Z999 accelerator"}]))
    code, _, err = _plan(capsys, p, "--json")
    assert code == 1 and f"no row of {p} could be predicted" in err


# -- 4. neighbours ------------------------------------------------------------------------------------------------

def test_a_column_named_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before, the row's value was read from the last of the two, silently (here: a width of 4096, not 2048)."""
    p = tmp_path / "twice.csv"
    p.write_text(_text([ROW]).replace("\n", ",hidden\n", 1).replace("note\"\n", "note\",4096\n"))
    code, out, err = _plan(capsys, p, "--json")
    assert code == 2 and out == ""
    assert f"{p}: the header names 'hidden' (columns 4, 17) more than once" in err


def test_a_trailing_comma_in_the_header_is_not_a_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every row had been refused: "line 2 has 16 fields, the header 17: missing  (truncated?)"."""
    p = tmp_path / "trailing.csv"
    p.write_text(_text([ROW]).replace("\n", ",\n", 1))
    code, out, _ = _plan(capsys, p, "--json")
    (row,) = json.loads(out)
    assert code == 0 and row.get("reason") is None and row["iter_time_s"] > 0


def test_spaces_around_header_names_are_not_part_of_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`row_id, layers, hidden, ...` (a comma and a space) had every row refused as "`layers` is blank"."""
    p = tmp_path / "spaced.csv"
    text = _text([ROW])
    head, rest = text.split("\n", 1)
    p.write_text(head.replace(",", ", ") + "\n" + rest)
    code, out, _ = _plan(capsys, p, "--json")
    (row,) = json.loads(out)
    assert code == 0 and row.get("reason") is None and row["iter_time_s"] > 0


@pytest.mark.parametrize("data,named", [
    (b"", "is empty: expected a CSV header naming the columns"),
    (b"  \n\n", "is empty: expected a CSV header naming the columns"),
    (b"\n" + _text([ROW]).encode(), "the first line is blank: expected a CSV header"),
    (_text([ROW]).encode("utf-16"), "is UTF-16 text (it starts with UTF-16's byte-order mark); save it as UTF-8"),
    (bytes(range(256)) * 4, "holds NUL bytes: a binary file (or UTF-16 text), not a UTF-8 CSV"),
    (_text([ROW]).replace(",", ";").encode(), "the first line is not a published-results CSV header: it names none of "
                                              f"{NEEDS}; the line is one field holding ';'s: stride reads "
                                              "comma-separated values"),
], ids=["empty", "blank-lines", "blank-first-line", "utf16", "binary", "semicolons"])
def test_a_file_that_is_not_the_format_is_named_for_what_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               data: bytes, named: str) -> None:
    """Each had been "expected a CSV header with a `row_id` column"."""
    p = tmp_path / "odd.csv"
    p.write_bytes(data)
    code, out, err = _plan(capsys, p, "--json")
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"stride plan: config error: {p}") and named in line


def test_a_utf8_byte_order_mark_is_read_past(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Guards what already held: Excel's "CSV UTF-8" starts with a BOM; the first column is still `row_id`."""
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbf" + _text([ROW]).replace("\n", "\r\n").encode())
    code, out, _ = _plan(capsys, p, "--json")
    (row,) = json.loads(out)
    assert code == 0 and row["row_id"] == "r1" and row.get("reason") is None
