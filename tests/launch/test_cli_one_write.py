"""Every line `stride` says about an error is one write to stderr, newline included. Every rank of `stride train
--nproc` says its refusal or error, and print writes the text and its newline separately, so two ranks' lines glued
together (`... -> 'bf16' (now)stride train: config error: ...`). 5921a19 made the ConfigError branch one write; the
checkpoint-error branch (a multi-line message from several ranks), the StrideError and OSError branches, the --out
refusal and the interrupted line still printed (review)."""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import pytest

import stride.cli.train
from stride.checkpoint.errors import CheckpointError
from stride.cli.main import main
from stride.errors import StrideError


class Recorder(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


@pytest.mark.parametrize(("exc", "code", "said"), [
    (CheckpointError("checkpoint step_00000004 does not fit:\n  model.d_model: 32 -> 64"), 1,
     "stride train: checkpoint error: checkpoint step_00000004 does not fit:\n  model.d_model: 32 -> 64\n"),
    (StrideError("the run folder is locked"), 1, "stride train: the run folder is locked\n"),
    (PermissionError(13, "Permission denied", "/x/run"), 1, "stride train: "),
    (KeyboardInterrupt(), 130, "stride train: stopped (interrupted)\n"),
])
def test_an_errors_line_is_one_write(exc: BaseException, code: int, said: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def run(args: argparse.Namespace) -> int:
        raise exc

    monkeypatch.setattr(stride.cli.train, "run", run)
    monkeypatch.setattr(sys, "stderr", Recorder())
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    assert main(["train", str(cfg)]) == code
    writes = sys.stderr.writes  # type: ignore[attr-defined]
    lines = [w for w in writes if w.startswith("stride train:")]
    assert len(lines) == 1 and lines[0].startswith(said) and lines[0].endswith("\n"), writes
    assert "".join(writes) == lines[0], writes  # nothing else, no separate newline


def test_the_out_refusal_is_one_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", Recorder())
    (tmp_path / "file").write_text("")
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    assert main(["train", str(cfg), "--out", str(tmp_path / "file" / "run")]) == 2
    writes = sys.stderr.writes  # type: ignore[attr-defined]
    assert len(writes) == 1 and writes[0].endswith("is a file, not a directory; give a directory path\n"), writes
