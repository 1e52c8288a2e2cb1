"""Inputs of `stride compare`, `report`, `top` and `analyze` that cannot be what a run measured: refused in one
line naming the file and the key, with exit 2 (bad input), never shown or judged as a figure."""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

import pytest
from fault_helpers import one_line_error, stride_main

from stride.bench.results import make_results

SUMMARY = {"name": "run", "status": "finished", "steps": 3, "samples_per_s": 100.0, "mfu": 0.01,
           "peak_mem_bytes": 1000, "step_time_breakdown_s": {"forward": 0.01, "backward": 0.02},
           "time_to_target_s": None, "final_train_loss": 1.0, "final_val_loss": None, "world_size": 1}


def _run(folder: Path, **changes: object) -> Path:
    """A run folder as `stride train` leaves it, with `changes` in its summary.json."""
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({**SUMMARY, **changes}))
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "loss": 1.0 / i, "time_s": 0.1 * i}) + "\n"
                                                  for i in range(1, 4)))
    (folder / "config.toml").write_text("[train]\nsteps = 3\nbatch_size = 64\n")
    return folder


@pytest.mark.parametrize(("changes", "words"), [
    ({"samples_per_s": -5, "mfu": 3.5}, ["mfu = 3.5", "fraction from 0 to 1"]),  # was "MFU 350.00 %", "-0.003 slower"
    ({"samples_per_s": -5}, ["samples_per_s = -5", "below 0"]),
    ({"mfu": -0.2}, ["mfu = -0.2"]),
    ({"step_time_breakdown_s": {"forward": -0.01}}, ["step_time_breakdown_s.forward = -0.01"]),
    ({"peak_mem_bytes": -1}, ["peak_mem_bytes = -1"]),
    ({"timesteps_per_s": float("inf")}, ["timesteps_per_s = inf", "not a finite number"]),
])
def test_an_impossible_summary_figure_is_refused_by_compare_report_and_top(tmp_path: Path, changes: dict,
                                                                           words: list[str]) -> None:
    bad, good = _run(tmp_path / "bad", **changes), _run(tmp_path / "good")
    for args in (("compare", str(good), str(bad)), ("compare", str(bad), str(good), "--json"), ("report", str(bad)),
                 ("top", str(bad), "--once")):
        res = stride_main(*args)
        one_line_error(res, "summary.json", *words, codes=(2,))
        assert "slower" not in res.out and "faster" not in res.out and "%" not in res.out
    assert not (bad / "report.html").exists()
    assert stride_main("compare", str(good), str(good)).code == 0  # a possible summary still compares


def test_an_impossible_figure_in_a_results_file_is_named(tmp_path: Path) -> None:
    w = {"name": "mlp", "version": 1, "mfu": 1.5, "peak_mem_bytes": 1, "time_to_target_s": None,
         "step_time_breakdown_s": {}, "throughput": {"unit": "samples/s", "median": 10.0, "min": 9.0, "max": 11.0,
                                                     "cv": 0.01}}
    (tmp_path / "results.json").write_text(json.dumps(make_results("quick", {}, [w])))
    for args in (("compare", str(tmp_path), str(tmp_path)), ("report", str(tmp_path))):
        one_line_error(stride_main(*args), "results.json", "workloads[0] (mlp)", "mfu = 1.5", codes=(2,))
    w.update(mfu=0.5, throughput={**w["throughput"], "median": -10.0})
    (tmp_path / "results.json").write_text(json.dumps(make_results("quick", {}, [w])))
    one_line_error(stride_main("compare", str(tmp_path), str(tmp_path)), "throughput.median = -10.0", codes=(2,))


def test_top_refuses_a_path_or_option_it_cannot_follow_with_exit_2(tmp_path: Path) -> None:
    """These were SystemExit messages (exit 1) while every other command's bad input exits 2."""
    run = _run(tmp_path / "run")
    (tmp_path / "empty").mkdir()
    for args, words in [((str(tmp_path / "none"), "--once"), ["none", "no such directory"]),
                        ((str(run / "summary.json"),), ["summary.json", "a file, not a run directory"]),
                        ((str(tmp_path / "empty"), "--once"), ["empty", "holds no run files"]),
                        ((str(run), "--interval", "0"), ["--interval = 0.0 must be > 0"]),
                        ((str(run), "--timeout", "-1"), ["--timeout = -1.0 must be >= 0"])]:
        one_line_error(stride_main("top", *args), *words, codes=(2,))


@pytest.mark.parametrize("command", ["compare", "top", "analyze", "profile", "report"])
def test_every_option_says_what_it_does(command: str) -> None:
    """`profile --set` had no help text; every option of these commands has one (defaults in words)."""
    parser = argparse.ArgumentParser(prog=f"stride {command}")
    importlib.import_module(f"stride.cli.{command}").register(parser)
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"stride {command} {action.option_strings[0]} has no help text"
            if action.default not in (None, False, []):
                assert "default" in action.help, f"stride {command} {action.option_strings[0]}: no default named"
