"""`stride bench` options refused before anything runs: a sweep option without the --sweep that reads it (it was
ignored: `--seeds 5` without `--sweep ttt` ran the quick suite, minutes, without a word) and a --device this
machine cannot run (`cuda` without a GPU failed only after the first run had started; `tpu` was reported as a
`--set train.device=tpu` the user never wrote)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from stride.cli.main import main

BENCH = ("bench", "--workloads", "mlp_tiny", "--set", "train.steps=2", "--no-report")


@pytest.fixture(autouse=True)
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reaching a run fails the test at once (the old code went on to train)."""
    import stride.bench.sweeps
    import stride.bench.world

    def ran(*args: object, **kwargs: object) -> None:
        raise AssertionError("a run started; the command line should have been refused first")

    monkeypatch.setattr(stride.bench.sweeps, "run_sweep", ran)
    monkeypatch.setattr(stride.bench.world, "world_sweep", ran)


def _refused(capsys: pytest.CaptureFixture[str], out: Path, argv: list[str], *words: str) -> str:
    rc = main([*BENCH, "--out", str(out), *argv])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, err
    for w in words:
        assert w in lines[0], lines[0]
    assert not out.exists()
    return lines[0]


@pytest.mark.parametrize(("argv", "words"), [
    (["--seeds", "5"], ["--seeds needs --sweep ttt", "without --sweep, bench runs each of --workloads once and "
                        "would ignore it", "nothing was run"]),
    (["--seeds", "5", "--batch-sizes", "8", "--variants", "bf16", "--world-sizes", "2"],
     ["--seeds needs --sweep ttt; --batch-sizes needs --sweep batch; --variants needs --sweep tradeoffs; "
      "--world-sizes needs --sweep world", "ignore them"]),
    (["--strategies", "ddp"], ["--strategies needs --sweep world"]),
    (["--scaling", "weak"], ["--scaling needs --sweep world"]),
    (["--repeats", "3"], ["--repeats needs --sweep world"]),
    (["--sweep", "ttt", "--batch-sizes", "8"], ["--batch-sizes needs --sweep batch; --sweep ttt would ignore it"]),
    (["--sweep", "batch", "--seeds", "3"], ["--seeds needs --sweep ttt; --sweep batch would ignore it"]),
    (["--sweep", "world", "--variants", "bf16"], ["--variants needs --sweep tradeoffs"]),
], ids=["seeds", "four", "strategies", "scaling", "repeats", "ttt+batch-sizes", "batch+seeds", "world+variants"])
def test_a_sweep_option_without_its_sweep_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     argv: list[str], words: list[str]) -> None:
    _refused(capsys, tmp_path / "out", argv, *words)


def test_the_suite_named_when_no_workloads_are_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "--out", str(tmp_path / "out"), "--seeds", "5"])
    assert rc == 2 and "without --sweep, bench runs the quick suite" in capsys.readouterr().err


def test_sweep_options_with_their_sweep_get_the_defaults_help_states() -> None:
    from stride.cli.bench import _check_args, register

    p = argparse.ArgumentParser()
    register(p)
    args = p.parse_args(["--sweep", "ttt", "--seeds", "2", "--device", "cpu"])
    _check_args(args)
    assert args.seeds == 2 and args.batch_sizes == [16, 32, 64, 128, 256] and args.variants is None
    assert (args.world_sizes, args.strategies, args.scaling, args.repeats) == (["1,2,4"], ["ddp,fsdp"],
                                                                               ["weak,strong"], 1)
    args = p.parse_args(["--sweep", "world", "--world-sizes", "1,2", "--repeats", "3", "--device", "cpu"])
    _check_args(args)
    assert args.world_sizes == ["1,2"] and args.repeats == 3 and args.seeds == 3


def test_an_unknown_device_names_device_not_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(capsys, tmp_path / "out", ["--device", "tpu"],
                    "--device: `train.device` = 'tpu' must be auto, cpu, cuda or cuda:N")
    assert "--set" not in line


@pytest.mark.parametrize(("argv", "words"), [
    (["--device", "cuda"], ["--device cuda: no CUDA device is available on this machine; use cpu or auto"]),
    (["--device", "cuda:1"], ["--device cuda:1: no CUDA device"]),
    (["--set", "train.device=cuda"], ["--set train.device=cuda: no CUDA device"]),
    (["--sweep", "world", "--device", "cuda"], ["--device cuda: no CUDA device"]),
    (["--sweep", "ttt", "--seeds", "2", "--device", "cuda"], ["--device cuda: no CUDA device"]),
], ids=["cuda", "cuda:1", "set", "world", "ttt"])
def test_cuda_without_a_gpu_is_refused_before_the_first_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                                            words: list[str]) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    line = _refused(capsys, tmp_path / "out", argv, *words)
    assert "bench 1 run(s)" not in line


def test_a_cuda_index_beyond_the_devices_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    _refused(capsys, tmp_path / "out", ["--device", "cuda:2"],
             "--device cuda:2: this machine has 2 CUDA device(s), cuda:0 to cuda:1")


@pytest.mark.parametrize(("argv", "words"), [
    (["--workloads", "mlp_tiny", "mlp_tiny"], ["--workloads: mlp_tiny is listed twice"]),
    (["--sweep", "batch", "--batch-sizes", "8", "16", "8"], ["--batch-sizes: 8 is listed twice"]),
    (["--sweep", "tradeoffs", "--variants", "bf16", "baseline", "bf16"], ["--variants: bf16 is listed twice"]),
], ids=["workloads", "batch-sizes", "variants"])
def test_a_repeated_value_is_refused_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          argv: list[str], words: list[str]) -> None:
    """`--workloads mlp_tiny mlp_tiny` planned the variant twice, measured it twice, wrote it twice into results.json,
    then the report refused that file: a traceback, exit 1, after minutes of runs."""
    line = _refused(capsys, tmp_path / "out", argv, *words, "nothing was run")
    assert line.startswith("stride bench: config error: ")


def test_results_the_report_refuses_are_one_line_after_measuring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A report that cannot be written once the runs are done: one line naming the file, results.json kept, no
    traceback (a ResultsError from stride.report.inputs propagated out of `stride bench`)."""
    import json

    import stride.cli.bench as bench
    from stride.bench.results import make_results

    out = tmp_path / "out"
    w = {"name": "mlp_tiny", "version": 1, "mfu": None, "peak_mem_bytes": 1, "step_time_breakdown_s": {},
         "time_to_target_s": None, "throughput": {"unit": "samples/s", "median": 10.0, "min": 9.0, "max": 11.0,
                                                   "cv": 0.1, "n": 3}}
    results = make_results("custom", {}, [w])
    written = json.dumps({**results, "workloads": [w, w]})  # what the old journal wrote for a repeated name

    def measured(args, names, out_dir, console):
        out_dir.mkdir(parents=True)
        (out_dir / "results.json").write_text(written)
        return results

    monkeypatch.setattr(bench, "_variants", measured)
    rc = main(["bench", "--workloads", "mlp_tiny", "--device", "cpu", "--out", str(out)])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 1 and len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("stride bench: no report written: ")
    assert f"{out / 'results.json'}: workloads[1] (mlp_tiny) is listed twice" in lines[0]
    assert (out / "results.json").read_text() == written and not (out / "report.html").exists()


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_prices_file_that_is_not_a_regular_file_is_named_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   kind: str) -> None:
    """`--prices FIFO` said "no such file" (`is_file()` is False for a FIFO); it is now read as input files are."""
    import os

    prices = tmp_path / "prices.toml"
    if kind == "fifo":
        os.mkfifo(prices)
    else:
        prices.mkdir()
    what = "a FIFO" if kind == "fifo" else "a directory"
    out = tmp_path / "out"
    rc = main(["bench", "--workloads", "mlp_tiny", "--device", "cpu", "--out", str(out), "--prices", str(prices)])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and not out.exists(), lines
    assert f"--prices: prices file {prices} is {what}, not a regular file" in lines[0] and "no such" not in lines[0]
    assert main(["report", str(tmp_path), "--prices", str(prices)]) == 2  # `stride report`: the same words
    err = capsys.readouterr().err
    assert f"stride report: prices file {prices} is {what}, not a regular file" in err, err


@pytest.mark.parametrize(("argv", "words"), [
    (["--sweep", "world", "--world-sizes", "0"], ["--world-sizes: 0 is not a process count"]),
    (["--sweep", "world", "--world-sizes", "1,-2"], ["--world-sizes: -2 is not a process count"]),
    (["--sweep", "world", "--world-sizes", "1,1"], ["--world-sizes: 1 is listed twice; give each once"]),
    (["--sweep", "world", "--world-sizes", "2", "4", "2"], ["--world-sizes: 2 is listed twice"]),
    (["--sweep", "world", "--world-sizes", "2", "--strategies", "ddp,ddp"], ["--strategies: ddp is listed twice"]),
    (["--sweep", "world", "--world-sizes", "2", "--scaling", "weak", "weak"], ["--scaling: weak is listed twice"]),
    (["--sweep", "world", "--world-sizes", "2", "--strategies", "fsdb"], ["--strategies: 'fsdb' is not a strategy"]),
    (["--sweep", "world", "--world-sizes", "2", "--workloads", "mlp_tiny", "ppo_market_making"],
     ["ppo_market_making runs its own loop"]),
], ids=["zero", "negative", "1,1", "2 4 2", "strategies", "scaling", "unknown-strategy", "second-workload-ppo"])
def test_a_world_sweep_command_line_is_refused_before_its_first_line(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     argv: list[str], words: list[str]) -> None:
    """`--sweep world --world-sizes 0` printed "bench mlp_tiny: world sweep ..." before the config error (and a bad
    second workload was found only after the first one's sweep had run); `--world-sizes 1,1` was de-duplicated
    without a word where `--batch-sizes 8 8` and a repeated --variants are refused."""
    line = _refused(capsys, tmp_path / "out", argv, *words)
    assert line.startswith("stride bench: config error: ") and "world sweep ..." not in line
