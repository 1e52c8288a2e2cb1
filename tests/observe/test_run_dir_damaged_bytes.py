"""A metrics.jsonl with bytes that are not UTF-8 (damaged outside stride: stride writes ASCII JSON) is cut by a
rollback or a resume like any file: the damaged line is no record. Before, both raised UnicodeDecodeError in the
middle of training (review of session 36's diff: only OSError was caught)."""

from __future__ import annotations

import json
from pathlib import Path

from stride.metrics.run_dir import RunDir


def _write(path: Path) -> None:
    ok = [json.dumps({"step": s, "loss": 1.0}) for s in (1, 2)]
    path.write_bytes(("\n".join(ok) + "\n").encode() + b'{"step": 3, "loss": 1.\xff}\n'
                     + (json.dumps({"step": 4, "loss": 1.0}) + "\n").encode())


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_a_rollback_cuts_a_file_with_damaged_bytes(tmp_path: Path) -> None:
    _write(tmp_path / "metrics.jsonl")
    dropped = RunDir(tmp_path).roll_back_records(2, {"from_step": 4, "to_step": 2, "reason": "test"})
    assert _steps(tmp_path / "metrics.jsonl") == [1, 2] and [r["step"] for r in dropped] == [4]


def test_a_resume_cut_reads_a_file_with_damaged_bytes(tmp_path: Path) -> None:
    _write(tmp_path / "metrics.jsonl")
    RunDir(tmp_path)._cut_records_after(2)
    assert _steps(tmp_path / "metrics.jsonl") == [1, 2]
