"""A refusal that is no config problem is not labelled `config error` (outside audit: `stride bench` on a corrupt
results.json read `stride bench: config error: .../results.json: not valid JSON`, a rerun of a finished run without
checkpoints `stride train: config error: run1 holds a finished run`). Bad input is said as `stride report` and
`stride compare` say it: the command, then the file and what is wrong, exit 2."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config.errors import ConfigError


@pytest.mark.parametrize("text, words", [('{"schema": 1, "garbage', "not valid JSON"),
                                         ('{"schema": "stride.bench.results"}', "")])
def test_bench_on_a_corrupt_results_json_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      text: str, words: str) -> None:
    out = tmp_path / "b"
    out.mkdir()
    (out / "results.json").write_text(text)
    assert main(["bench", "--out", str(out), "--workloads", "mlp_tiny"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"stride bench: {out / 'results.json'}: {words}"), err
    assert "config error" not in err and err.rstrip().endswith("remove that file to measure again")
    assert (out / "results.json").read_text() == text  # nothing written over it
    # `stride report` says the same file's fault the same way
    assert main(["report", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"stride report: {out / 'results.json'}: {words}")


class NotTheConfigs(ConfigError):
    label = ""  # a refusal that is a ConfigError (so `stride train --nproc` ranks record it) but no config problem


def test_a_config_error_without_a_label_is_said_without_one(capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def register(parser: argparse.ArgumentParser) -> None:
        def run(args: argparse.Namespace) -> int:
            raise NotTheConfigs("run1 holds a finished run; use another --out")

        parser.set_defaults(func=run)

    monkeypatch.setattr("stride.cli.compare.register", register)
    assert main(["compare"]) == 2
    assert capsys.readouterr().err == "stride compare: run1 holds a finished run; use another --out\n"


def test_a_rerun_of_a_finished_run_without_checkpoints_is_not_a_config_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tiny_run import MLP_TINY_TOML

    cfg = tmp_path / "run.toml"
    cfg.write_text(MLP_TINY_TOML)
    out = tmp_path / "run1"
    assert main(["train", str(cfg), "--out", str(out)]) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert main(["train", str(cfg), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stride train: {out} holds a finished run"), err
    assert "config error" not in err and len(err.splitlines()) == 1
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # nothing written
