"""What a user can get wrong on the command line ends in one line naming it (and a close match), not a
traceback: paths that are files where a directory belongs and the reverse, a bench directory given for a
run, a misspelt collective; `stride --version`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stride.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--set", "train.steps=2", "--set", "data.n_steps=512", "--set", "metrics.progress=false"]


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_version() -> None:
    out = subprocess.run([sys.executable, "-m", "stride", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("stride 0.") and "torch 2." in out.stdout and "Python 3." in out.stdout


def test_an_output_path_under_a_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: FileExistsError / NotADirectoryError tracebacks from mkdir; then mkdir's text and exit 1; bad input: 2
    (every command's --out: tests/cli/test_out_is_a_file.py)."""
    f = tmp_path / "results.json"
    f.write_text("{}")
    assert main(["train", str(ROOT / "configs/quickstart.toml"), "--out", str(f), *TINY]) == 2
    assert one_line_error(capsys) == f"stride train: --out {f}: {f} is a file, not a directory; give a directory path"
    assert main(["train", str(ROOT / "configs/quickstart.toml"), "--out", str(f / "run"), *TINY]) == 2
    assert one_line_error(capsys) == f"stride train: --out {f / 'run'}: {f} is a file, not a directory; give a " \
                                     "directory path"


def test_comm_names_the_mistake_before_measuring(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["comm", "--collectives", "allreduce"]) == 2
    assert "did you mean `all_reduce`?" in one_line_error(capsys)
    # before: the benchmark ran, then os.replace raised IsADirectoryError on writing the profile
    assert main(["comm", "--profile-out", str(tmp_path)]) == 2
    assert "is a directory; give a file path" in one_line_error(capsys)
    assert main(["comm", "--profile-out", str(tmp_path / "no" / "hw.toml")]) == 2
    assert f"the directory {tmp_path / 'no'} does not exist" in one_line_error(capsys)


def _bench_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bench"
    (d / "mlp_tiny").mkdir(parents=True)
    (d / "results.json").write_text("{}")
    for name in ("metrics.jsonl", "summary.json", "config.toml"):
        (d / "mlp_tiny" / name).write_text("")
    return d


def test_repro_and_top_say_what_the_path_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench_dir(tmp_path)
    assert main(["repro", str(bench)]) == 2
    assert f"a `stride bench` directory; re-run one of its runs, e.g. `stride repro {bench / 'mlp_tiny'}`" in \
        one_line_error(capsys)
    assert main(["repro", str(bench / "results.json")]) == 2
    assert "a file, not a run directory" in one_line_error(capsys)
    assert main(["repro", str(bench / "mlp_tiny" / "summary.json")]) == 2
    assert f"give the run directory that holds it ({bench / 'mlp_tiny'})" in one_line_error(capsys)
    assert main(["top", str(bench), "--once"]) == 2  # bad input: exit 2, as every command's
    assert re.search(r"holds no run files .*runs inside it: mlp_tiny", one_line_error(capsys))
    (tmp_path / "empty").mkdir()
    assert main(["top", str(tmp_path / "empty"), "--once"]) == 2
    assert re.search(r"empty holds no run files \(config.toml, metrics.jsonl, summary.json\)", one_line_error(capsys))
    assert main(["top", str(bench / "results.json")]) == 2
    assert "a file, not a run directory" in one_line_error(capsys)


def test_analyze_takes_a_run_directory_for_its_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A `stride profile --out DIR` directory holds analysis.json beside traces/: before, `stride analyze DIR`
    read analysis.json as a trace and failed ('no traceEvents list')."""
    sys.path.insert(0, str(ROOT / "tests" / "profile"))
    from synth import cpu_trace, write

    run = tmp_path / "prof"
    (run / "traces").mkdir(parents=True)
    write(run / "traces" / "trace_rank0.json", cpu_trace())
    (run / "analysis.json").write_text("{}")
    (run / "summary.json").write_text("{}")
    assert main(["analyze", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"]["0"]["device"] == "cpu"


def test_profile_steps_beyond_what_a_trace_can_hold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`stride profile --steps 100000` used to start tracing (about 1 MB of trace and 12 MB of profiler memory a
    step on the quick-start model); now it is refused before anything runs, and a count above 20 gets a note."""
    cfg = str(ROOT / "configs" / "quickstart.toml")
    assert main(["profile", cfg, "--steps", "100000", "--out", str(tmp_path / "p")]) == 2
    assert "at most 1000 traced steps" in one_line_error(capsys)
    assert not (tmp_path / "p").exists()
    assert main(["profile", str(tmp_path / "missing.toml"), "--steps", "50"]) == 2
    err = capsys.readouterr().err
    assert "--steps 50 traces every step: about 60 MB of trace" in err and "missing.toml" in err
