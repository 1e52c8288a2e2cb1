"""`--out` naming a regular file (or a path through one) is bad input: one line, exit 2, as every other refusal of what
the user gave, whichever command (outside audit: train, bench and profile exited 1 with mkdir's "a file of that name
exists" text; `stride data synth --out FILE` already said it this way, exit 2)."""

from __future__ import annotations

import argparse
import errno
from pathlib import Path

import pytest

from stride.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "quickstart.toml")
COMMANDS = {
    "train": ["train", CONFIG],
    "bench": ["bench", "--workloads", "mlp_tiny"],
    "profile": ["profile", CONFIG],
    "sweep": ["sweep", CONFIG, "--grid", "train.seed=0..1"],
    "repro": ["repro", "RUN"],
}


@pytest.mark.parametrize("below", [False, True], ids=["the file", "a folder in the file"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_out_naming_a_file_is_refused_with_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
                                             below: bool) -> None:
    f = tmp_path / "README.md"
    f.write_text("not a folder\n")
    out = f / "sub" if below else f
    args = [a.replace("RUN", str(tmp_path)) for a in COMMANDS[command]]
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"stride {command}: --out {out}: {f} is a file, not a directory; give a directory path\n"
    assert f.read_text() == "not a folder\n" and sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]


@pytest.mark.parametrize("exc, code", [(FileExistsError(errno.EEXIST, "File exists", "x"), 2),
                                       (NotADirectoryError(errno.ENOTDIR, "Not a directory", "x/y"), 2),
                                       (IsADirectoryError(errno.EISDIR, "Is a directory", "x"), 2),
                                       (PermissionError(errno.EACCES, "Permission denied", "x"), 1),
                                       (OSError(errno.ENOSPC, "No space left on device", "x"), 1)],
                         ids=lambda v: type(v).__name__ if isinstance(v, OSError) else str(v))
def test_a_path_of_the_wrong_kind_met_later_is_bad_input_too(capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch, exc: OSError,
                                                             code: int) -> None:
    """Where a command meets such a path itself (its OSError reaches main): 2 for a path of the wrong kind, 1 for the
    machine's state (no permission, a full disk), as before."""
    def register(parser: argparse.ArgumentParser) -> None:
        def run(args: argparse.Namespace) -> int:
            raise exc

        parser.set_defaults(func=run)

    monkeypatch.setattr("stride.cli.compare.register", register)
    assert main(["compare"]) == code
    err = capsys.readouterr().err
    assert err.startswith("stride compare: x") and len(err.splitlines()) == 1


def test_metrics_out_dir_naming_a_file_is_refused_with_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The run folder's parent from the config (`metrics.out_dir`, no --out) naming a file: the same bad input, 2
    (it was 1: the run folder's own OSError said the machine's state)."""
    f = tmp_path / "afile"
    f.write_text("x\n")
    assert main(["train", CONFIG, "--set", f'metrics.out_dir="{f}"', "--set", "train.steps=1"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"{f} is a file, not a directory" in err, err
    assert f.read_text() == "x\n" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
