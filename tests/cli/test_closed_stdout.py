"""`stride ... | head`: a reader that leaves ends every command quietly, with the status a shell reports for a process
SIGPIPE killed (141), as `stride data inspect --json | head` did alone (outside audit: `plan --list-hardware --json`
printed "stride plan: Broken pipe" and exited 1; `plan --from-csv`, `plan --model` and `analyze`, whose tables rich
prints, exited 1 silently)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "profile"))
from synth import cpu_trace, write  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = [
    ["--version"],  # (argparse's own --help ignores a failed write: quiet, status 0)
    ["config", "show", "configs/quickstart.toml"],
    ["plan", "--list-hardware", "--json"],  # print()
    ["plan", "--list-hardware"],  # rich tables
    ["plan", "--from-csv", "data/perfmodel/published_dev.csv"],
]


def analyze_args(tmp_path: Path, json_out: bool) -> list[str]:
    return ["analyze", str(write(tmp_path / "t.json", cpu_trace())), *(["--json"] if json_out else [])]


def run_reader_gone(args: list[str]) -> subprocess.CompletedProcess[str]:
    """The reader has gone before the first byte: the first write fails, whatever the output's size."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", "stride", *args], stdout=w, stderr=subprocess.PIPE, text=True,
                              cwd=ROOT, timeout=300)
    finally:
        os.close(w)


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a)[:40])
def test_a_closed_stdout_ends_quietly_with_141(args: list[str]) -> None:
    p = run_reader_gone(args)
    assert (p.returncode, p.stderr) == (141, "")


@pytest.mark.parametrize("json_out", [False, True], ids=["tables", "json"])
def test_analyze_into_a_closed_stdout(tmp_path: Path, json_out: bool) -> None:
    p = run_reader_gone(analyze_args(tmp_path, json_out))
    assert (p.returncode, p.stderr) == (141, "")


@pytest.mark.parametrize("args", [["plan", "--list-hardware", "--json"], ["plan", "--list-hardware"],
                                  ["plan", "--from-csv", "data/perfmodel/published_dev.csv"]], ids=lambda a: a[1])
def test_a_reader_that_leaves_after_ten_bytes(args: list[str]) -> None:
    """`| head -c 10`: the reader takes 10 bytes and leaves while the command still writes (a 4 KiB pipe holds less
    than each of these outputs, so the command is still writing when it closes)."""
    p = subprocess.Popen([sys.executable, "-m", "stride", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         cwd=ROOT, pipesize=4096)
    assert p.stdout is not None and p.stderr is not None
    assert len(p.stdout.read(10)) == 10
    p.stdout.close()
    err = p.stderr.read().decode()
    assert (p.wait(timeout=300), err) == (141, "")


def test_a_broken_pipe_that_is_not_stdout_is_not_taken_for_head(capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A BrokenPipeError from a pipe of the command's own (a child's stdin), with stdout open, is said as before."""
    import argparse

    from stride.cli import main as cli_main

    def register(parser: argparse.ArgumentParser) -> None:
        def run(args: argparse.Namespace) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        parser.set_defaults(func=run)

    monkeypatch.setattr(cli_main, "stdout_closed", lambda: False)
    monkeypatch.setattr("stride.cli.compare.register", register)
    assert cli_main.main(["compare"]) == 1
    assert capsys.readouterr().err == "stride compare: Broken pipe\n"
