"""A resumed run's metrics.jsonl holding a line nested 100k deep, or a FIFO in its place (session 37's hostile-input
audit). The nested line raised RecursionError out of the resume's cut (a traceback mid-start: only ValueError was
caught); the FIFO blocked the resume for ever in read_text(). Now the line is no record (dropped, as any unreadable
line), and the FIFO is a RunDirError naming it, exit status 2. Both tests fail on the old code (the FIFO one by
its reader thread never returning)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from stride.metrics.run_dir import RunDir, RunDirError


def test_a_line_nested_too_deeply_is_no_record(tmp_path: Path) -> None:
    ok = [json.dumps({"step": s, "loss": 1.0, "time_s": float(s)}) for s in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text(ok[0] + "\n" + "[" * 100_000 + "]" * 100_000 + "\n" + ok[1] + "\n"
                                            + ok[2] + "\n")
    run = RunDir(tmp_path)
    run.drop_records_after(2)
    assert run.dropped_time_s == 3.0
    dropped = run._cut_records_after(2)
    assert [r["step"] for r in dropped] == [3]
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_a_fifo_as_metrics_jsonl_is_named_not_read(tmp_path: Path) -> None:
    """The folder is refused when opened (0ace281), before a resume's cut would read the FIFO (it blocked for ever)."""
    os.mkfifo(tmp_path / "metrics.jsonl")
    outcome: list[object] = []

    def open_and_cut() -> None:
        try:
            run = RunDir(tmp_path)
            run.drop_records_after(2)
            run._cut_records_after(2)
        except RunDirError as exc:
            outcome.append(exc)

    t = threading.Thread(target=open_and_cut, daemon=True)
    t.start()
    t.join(30)  # not a timing: the old reader never returned
    if t.is_alive():  # free the blocked open so the thread ends, then fail
        os.close(os.open(tmp_path / "metrics.jsonl", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("the resume's cut blocked on a FIFO")
    assert len(outcome) == 1 and isinstance(outcome[0], RunDirError) and outcome[0].exit_code == 2
    assert str(outcome[0]) == (f"{tmp_path / 'metrics.jsonl'} is a FIFO: metrics.jsonl must be a regular file of the "
                               "run folder (move it away, or use another --out)")
