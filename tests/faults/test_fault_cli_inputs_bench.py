"""`stride bench` and `stride sweep` command-line inputs that measure nothing or name what is not there.

Each is refused with stride's one line (exit 2) before anything runs: no results.json, no report, no run
directory. `--help` states every option's default.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from fault_helpers import one_line_error, stride_main

BENCH = ("bench", "--workloads", "mlp_tiny", "--set", "train.steps=2")


@pytest.mark.parametrize(("args", "words"), [
    # a traceback ending in ValueError from stride/bench/sweeps.py, exit 1
    (["--sweep", "tradeoffs", "--variants", "nosuch", "bf16"], ["--variants", "'nosuch'", "variants are baseline"]),
    (["--sweep", "tradeoffs", "--variants", "bf1"], ["'bf1'", "did you mean `bf16`"]),
    # "bench 0 run(s)", an empty table, results.json and a report, exit 0
    (["--sweep", "ttt", "--seeds", "0"], ["--seeds 0", "at least 1 seed"]),
    (["--sweep", "world", "--repeats", "0"], ["--repeats 0", "at least 1"]),
    (["--repeats", "-1"], ["--repeats -1"]),  # accepted, then ignored by the suite
    (["--sweep", "batch", "--batch-sizes", "32", "0"], ["--batch-sizes 0"]),  # named `--set train.batch_size=0`
    # a note that costs are left out, exit 0, after the whole sweep ran
    (["--prices", "/nonexist.toml"], ["--prices /nonexist.toml", "no such file"]),
])
def test_bench_refuses_inputs_that_measure_nothing_before_running(tmp_path: Path, args: list[str],
                                                                   words: list[str]) -> None:
    out = tmp_path / "out"
    res = stride_main(*BENCH, "--out", str(out), *args)
    one_line_error(res, *words, codes=(2,))
    assert "bench " not in res.err.splitlines()[0]  # no "bench N run(s) ..." line: nothing was planned to run
    assert not out.exists()


def test_a_price_table_that_is_not_toml_is_refused_before_running(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text("not = [toml\n")
    res = stride_main(*BENCH, "--out", str(tmp_path / "out"), "--prices", str(prices))
    one_line_error(res, str(prices), "not valid TOML", codes=(2,))
    assert not (tmp_path / "out").exists()


def test_the_shipped_price_table_missing_only_leaves_costs_out(tmp_path: Path, monkeypatch, capsys) -> None:
    """No --prices: stride's own table gone (a trimmed install) is a note, not an error."""
    import stride.report.recommend as recommend
    from stride.cli.bench import _load_prices

    monkeypatch.setattr(recommend, "DEFAULT_PRICES", tmp_path / "gone.toml")
    assert _load_prices(None) == {}
    assert "the report leaves costs out" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["bench", "sweep"])
def test_help_states_every_options_default(command: str) -> None:
    """`--seeds`, `--batch-sizes` and `--repeats` said nothing of their defaults (3, 16..256, 1)."""
    import importlib

    p = argparse.ArgumentParser()
    importlib.import_module(f"stride.cli.{command}").register(p)
    for action in p._actions:
        if not action.option_strings or action.nargs == 0:  # positionals, -h and on/off flags (off by default)
            continue
        assert action.help and "default" in action.help, f"stride {command} {action.option_strings[0]}: {action.help!r}"
    helps = {a.option_strings[0]: a.help for a in p._actions if a.option_strings}
    if command == "bench":
        assert "(default 3)" in helps["--seeds"] and "(default 16 32 64 128 256)" in helps["--batch-sizes"]
        assert "default 1" in helps["--repeats"] and "adafactor" in helps["--variants"]


@pytest.mark.parametrize(("args", "words"), [
    (["--cpus-per-pack", "0"], ["--cpus-per-pack 0"]),
    (["--probe-s", "nan"], ["--probe-s nan"]),
    (["--probe-s", "0"], ["--probe-s 0.0"]),
    (["--price-per-hour", "-1"], ["--price-per-hour -1.0"]),
])
def test_sweep_numeric_options_out_of_range_are_refused(tmp_path: Path, args: list[str], words: list[str]) -> None:
    from fault_helpers import REPO

    out = tmp_path / "s"
    res = stride_main("sweep", str(REPO / "configs" / "quickstart.toml"), "--grid", "train.seed=0,1",
                      "--out", str(out), *args)
    one_line_error(res, *words, codes=(2,))
    assert not out.exists()
