"""`stride report RUN` on a run whose metrics.jsonl has a line that is not JSON (outside audit, defect 2).

Before: the report left the line out of its loss curve without a word, while `stride top RUN --once` refused the
same file ("line 3, a complete line, is not JSON"). Now the report says, on stderr and in report.html and
summary.md ("Left out"), how many whole lines were left out and the first one's number. A last line cut short by a
kill (no newline after it) is a killed run's, as top and the trainer's resume treat it: left out without a note.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tiny_run import MLP_TINY_TOML

from stride.cli.main import main


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("run")
    (home / "c.toml").write_text(MLP_TINY_TOML + "log_every = 1\n")  # [metrics] is the last table
    assert main(["train", str(home / "c.toml"), "--out", str(home / "RUN")]) == 0
    assert len((home / "RUN" / "metrics.jsonl").read_text().splitlines()) >= 4
    return home / "RUN"


def _copy(finished: Path, tmp_path: Path) -> Path:
    run = Path(shutil.copytree(finished, tmp_path / "RUN"))
    for name in ("report.html", "summary.md"):
        (run / name).unlink(missing_ok=True)
    return run


def test_a_broken_line_is_counted_and_named_in_the_output_and_the_report(finished: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(finished, tmp_path)
    path = run / "metrics.jsonl"
    lines = path.read_text().splitlines()
    lines[2] = '{"step": 3, "loss": oops'
    lines[3] = "not json either"
    path.write_text("\n".join(lines) + "\n")
    assert main(["top", str(run), "--once"]) == 2  # top refuses it: the report must not be silent about it
    assert "line 3, a complete line, is not JSON" in capsys.readouterr().err
    assert main(["report", str(run)]) == 0
    err = capsys.readouterr().err
    said = "2 line(s) that are not JSON left out of the loss curve (the first: line 3)"
    assert said in err and str(path) in err
    assert said in (run / "report.html").read_text() and said in (run / "summary.md").read_text()


def test_a_last_line_cut_short_by_a_kill_is_no_note(finished: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy(finished, tmp_path)
    path = run / "metrics.jsonl"
    path.write_text(path.read_text()[:-15])  # the last record cut, no newline after it
    assert main(["top", str(run), "--once"]) == 0
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    assert "not JSON" not in capsys.readouterr().err
    assert "not JSON" not in (run / "summary.md").read_text()
