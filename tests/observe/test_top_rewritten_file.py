"""`stride top` on a metrics.jsonl that a resume rewrites (audit 16, M4): the follower starts over from byte 0 and
the view drops what it held, instead of reading from the old offset into the middle of a line."""

from __future__ import annotations

import json
import os
from pathlib import Path

from stride.cli.top import RunView
from stride.metrics.observe import follow
from stride.metrics.observe.follow import JsonlFollower


def _lines(steps: range, loss: float = 1.0) -> str:
    return "".join(json.dumps({"step": s, "loss": loss + s / 1000, "samples_per_s": 900.0}) + "\n" for s in steps)


def _steps(records: list) -> list:
    return [r["step"] if isinstance(r, dict) else r for r in records]


def test_a_file_replaced_by_rename_is_read_again_from_the_start(tmp_path: Path) -> None:
    m = tmp_path / "metrics.jsonl"
    m.write_text(_lines(range(1, 151)))
    f = JsonlFollower(m)
    assert len(list(f.iter_new())) == 150
    tmp = tmp_path / ".tmp"  # what RunDir does at a resume: the records up to the checkpoint, renamed over
    tmp.write_text(_lines(range(1, 101)) + _lines(range(101, 103), loss=2.0))
    os.replace(tmp, m)
    got = list(f.iter_new())
    assert got[0] is follow.STARTED_OVER and _steps(got[1:]) == list(range(1, 103))


def test_a_file_cut_in_place_is_read_again_from_the_start(tmp_path: Path) -> None:
    m = tmp_path / "metrics.jsonl"
    m.write_text(_lines(range(1, 151)))
    f = JsonlFollower(m)
    list(f.iter_new())
    with open(m, "r+") as w:  # the same cut in place, shorter than what was read
        w.truncate(0)
        w.write(_lines(range(1, 101)))
    got = list(f.iter_new())
    assert got[0] is follow.STARTED_OVER and _steps(got[1:]) == list(range(1, 101))
    assert list(f.iter_new()) == []


def test_a_file_rewritten_in_place_past_the_offset_is_noticed(tmp_path: Path) -> None:
    """Cut and grown again before the next read, to a line boundary at the old offset: the size alone cannot tell;
    the bytes before the offset differ from those read there."""
    m = tmp_path / "metrics.jsonl"
    m.write_text(_lines(range(1, 11)))
    f = JsonlFollower(m)
    list(f.iter_new())
    with open(m, "r+") as w:
        w.truncate(0)
        w.write(_lines(range(1, 6)) + _lines(range(6, 21), loss=2.0))
    got = list(f.iter_new())
    assert got[0] is follow.STARTED_OVER and _steps(got[1:]) == list(range(1, 21))
    assert got[-1]["loss"] == 2.02


def test_the_view_drops_the_replaced_records_and_keeps_one_per_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    m = run / "metrics.jsonl"
    m.write_text(_lines(range(1, 151)))
    view = RunView(run)
    view.refresh()
    assert view.train[-1]["step"] == 150
    tmp = run / ".tmp"
    tmp.write_text(_lines(range(1, 101)))
    os.replace(tmp, m)
    with open(m, "a") as w:
        w.write(_lines(range(101, 121), loss=3.0))
    view.refresh()
    steps = [r["step"] for r in view.train]
    assert steps == list(range(1, 121)) and view.train[-1]["loss"] == 3.12
    with open(m, "a") as w:  # steps logged again without a rewrite: the last record of a step is kept
        w.write(_lines(range(119, 122), loss=4.0))
    view.refresh()
    steps = [r["step"] for r in view.train]
    assert steps == list(range(1, 122)) and view.train[-1]["loss"] == 4.121
