"""`stride top` names the file and line of a run file it cannot read.

Audit 2: a metrics.jsonl with a non-UTF-8 byte gave `stride top: 'utf-8' codec can't decode byte 0xd7 in position 3:
invalid continuation byte` (exit 2, but naming neither the file nor the line, unlike its JSON errors).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.cli.main import main


@pytest.mark.parametrize("name", ["metrics.jsonl", "system.jsonl"])
def test_a_line_that_is_not_utf8_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      name: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_bytes(b'{"step": 1, "loss": 1.0}\n')
    (run / name).write_bytes(b'{"step": 1, "loss": 1.0}\n{"st\xd7p": 2, "loss": 0.5}\n')
    assert main(["top", str(run), "--once"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"stride top: {run / name}: line 2 is not UTF-8 text (byte 0xd7)"), err
